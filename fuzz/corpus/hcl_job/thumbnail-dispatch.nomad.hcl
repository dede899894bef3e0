# A parameterized (dispatch) job: each dispatch carries a payload written to a file and
# meta values; job meta gives the optional ones their defaults. The payload is written to
# local/input.json in the task's (working) directory.
job "thumbnail" {
  type        = "batch"
  datacenters = ["dc1"]

  parameterized {
    payload       = "required"
    meta_required = ["image_id"]
    meta_optional = ["width", "height"]
  }

  meta {
    width  = "320"
    height = "240"
  }

  group "resize" {
    task "resize" {
      driver = "raw_exec"

      dispatch_payload {
        file = "input.json"
      }

      config {
        command = "/bin/sh"
        args = [
          "-c",
          "cat local/input.json; echo ${NOMAD_META_image_id} ${NOMAD_META_width}x${NOMAD_META_height}",
        ]
      }

      resources {
        cpu    = 50
        memory = 32
      }
    }
  }
}
