{
  "algorithm": "ed25519",
  "key_id": "b1c0ee0e2dc5634c",
  "signature": "z3L2ZUmW81QEV5tM8qFWB3YIiWn33XuQwUfVwy9Z6hR0NGklvhDOWAJAxd60QAiIBq8yiG0F0Maol+7yKYYrDg=="
}
