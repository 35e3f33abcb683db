"""The `benchgate` command: one thin module per group of commands over the stages, kfp/ and controller/."""
