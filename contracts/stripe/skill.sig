{
  "algorithm": "ed25519",
  "key_id": "e8d028e5219d62de",
  "signature": "5601MgWGX8jJAQ75poYSPT4o56qSqGxaCuXbYly7S5c8LkC0mpCOOOjT43oYSt6ua+w4uHwrtN8NQzMd2GL+Dw=="
}
