quota {
  policy = "read"
}
