{
  "algorithm": "ed25519",
  "key_id": "e8d028e5219d62de",
  "signature": "bx74KJ9Y1C6NQwe7TPPH0u4co92jBAXO+AZAMGF31GV1LZGIfgeYy45wAXQstbpvHuS4kmGR/l4O/F+iZ5eYDA=="
}
