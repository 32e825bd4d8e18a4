{
  "algorithm": "ed25519",
  "key_id": "1b2cd676cbc910c8",
  "signature": "iAC0XjIDUVMqEDM/ebjFJOP/rAkO9+x35XRRLe0Wlh3CRiBd7lNXn29rwsy1vEm1BYMuxoXe9jWBmX8bWovEDw=="
}
