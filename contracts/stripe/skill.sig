{
  "algorithm": "ed25519",
  "key_id": "e8d028e5219d62de",
  "signature": "VlVwKIbiaDicKprdx0PtXC2313rprsYNzZbkyMyfldhvwRqrurYxmhUBHE2dTghlVde3oXE2sy9aIBJEpUxuCA=="
}
