namespace "default" {
  policy = "read"
}
