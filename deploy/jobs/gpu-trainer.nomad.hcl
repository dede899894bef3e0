# A training run that needs a GPU, whole cores and burstable memory. teamster refuses the
# device request by name (its nodes fingerprint no devices); cores and memory_max it acts on.
job "gpu-trainer" {
  type        = "batch"
  datacenters = ["dc1"]

  group "train" {
    task "train" {
      driver = "docker"

      config {
        image   = "pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime"
        command = "python"
        args    = ["/local/train.py", "--epochs", "10"]
      }

      resources {
        cores      = 4
        memory     = 4096
        memory_max = 8192

        device "nvidia/gpu" {
          count = 1

          constraint {
            attribute = "${device.attr.memory}"
            operator  = ">="
            value     = "8 GiB"
          }

          affinity {
            attribute = "${device.model}"
            operator  = "="
            value     = "Tesla V100-SXM2-16GB"
            weight    = 50
          }
        }
      }
    }
  }
}
