{
  "algorithm": "ed25519",
  "key_id": "e8d028e5219d62de",
  "signature": "US6iiiBh/4zPmL7EpAvRseXbZXrgzlkM6R31OcvxjR/MVZxmc5xOp9soh4XRvZJ66lVkq89sBk3Y7qvaPkbgCA=="
}
