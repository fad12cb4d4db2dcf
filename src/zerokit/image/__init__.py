"""Image facts: what an environment is built from and what it holds.

stack (a stack's pins, its lock and DeepSpeed build flags), site_torch (a site's own PyTorch), runtimes
(the container runtimes' words), container (the image a process runs in), ops_gate (every DeepSpeed op
prebuilt and loading), built_ops (what the gate recorded the ops as built for), ds_install (the ops the
installed DeepSpeed prebuilt, read without importing it), image_info and sbom (what an image records about
itself), provenance (what a run ran on).
"""
