"""A test-side "kubelet-lite": owns one Node whose pods run as real local processes.

kwok only simulates pod status; pods bound to this runner's node (default `local-gpu-0`) really
run their container's command, as processes bound to a loopback pod IP (127.17.x.x), probed,
restarted and gracefully stopped the way a kubelet would. See docs/cpu-adaptations.md.
"""
