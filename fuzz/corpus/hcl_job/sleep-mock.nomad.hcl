# The HCL twin of sleep-mock.json, with its sizes as variables:
#   teamster job run --var sleepers=20 deploy/jobs/sleep-mock.nomad.hcl
variable "sleepers" {
  type    = number
  default = 10
}

variable "run_for" {
  type    = string
  default = "5s"
}

job "sleep-mock" {
  type        = "batch"
  datacenters = ["dc1"]

  group "sleepers" {
    count = var.sleepers

    task "sleep" {
      driver = "mock"

      config {
        run_for   = var.run_for
        exit_code = 0
      }

      resources {
        cpu    = 20
        memory = 16
      }
    }
  }
}
