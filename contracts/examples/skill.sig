{
  "algorithm": "ed25519",
  "key_id": "b1c0ee0e2dc5634c",
  "signature": "x7ZymljuYWkPei87i8LY7i4lA2eQV5ydIiLZKNsDdAASJ6jVbx6QR3upV30AQI6pGNajl2/H8tz9IzbQQvRhBA=="
}
