{
  "algorithm": "ed25519",
  "key_id": "e8d028e5219d62de",
  "signature": "I1oEp/jj97YQflypn/TubzqeoVeVSJJhaJ4l1nunjdDTEDHIcY8yhYQCMKYIQHKjo7l3PRbMn5IMKsC+ep6zAg=="
}
