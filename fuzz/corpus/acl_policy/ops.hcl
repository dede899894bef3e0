namespace "*" {
  policy       = "write"
  capabilities = ["alloc-lifecycle"]
}
namespace "secret-*" {
  policy = "deny"
}
node {
  policy = "read"
}
agent {
  policy = "write"
}
operator {
  policy = "read"
}
