{
  "algorithm": "ed25519",
  "key_id": "7fa4442cf88d4e16",
  "signature": "ONKjPqUXsdiIMSxqwXcz+sECWvRrKk4GScEtQBsfYHVCCVIwlC/mL24Cu+b5o65stIb0x6fA9tJpJFp5OnOvAQ=="
}
