{
  "algorithm": "ed25519",
  "key_id": "b1c0ee0e2dc5634c",
  "signature": "UXkkNXBPj8iEzbZCOuEGb6lNKQ77qND/0c/j0gvy3rNR7nl1bZoDUIUyoj9ctUL6SOHgYM11sRdcbmCaiylJCw=="
}
