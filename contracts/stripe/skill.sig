{
  "algorithm": "ed25519",
  "key_id": "7fa4442cf88d4e16",
  "signature": "4OX2v00iowxpl2T+5GLE+bHse4sGOXt/74gRw9ZB3nyYpm1AMJD72ANlYjqdk/5ZSbJWP+fREKgaSmU01hRICw=="
}
