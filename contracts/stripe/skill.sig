{
  "algorithm": "ed25519",
  "key_id": "7fa4442cf88d4e16",
  "signature": "Xcw1QojPaU7K4VM6GKJKiNl6mG0Wy2DFGkjwsbDcj28uzpaeRaDkBAdzjdanIdprq3g++0yPLMCHD9xk9gfhCA=="
}
