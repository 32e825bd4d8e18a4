{
  "algorithm": "ed25519",
  "key_id": "e8d028e5219d62de",
  "signature": "rAgyW5WimESfrrxJXi9Ew++NUwy2CY+r0i7tw4Ni17in9irhwAHV0JKOqAeifE+4bw9bJgQSLynvvPgL336kCw=="
}
