"""Containers whose image was built here (`make images`: OCI archives under build/images), run with
a real OCI runtime (crun) instead of as host processes, so what the pod spec says about the
container itself is exercised as a kubelet would: its image's files and user, its command, args
and env as rendered, its securityContext (user, group, read-only root filesystem, capabilities,
no privilege escalation) and its volumes mounted where the pod mounts them.

Node puts the parts together: which images run here (images.py), their unpacked root filesystems
(unpack.py), each container's bundle (bundle.py) and the runtime that runs it (crun.py).

What differs from a kubelet's runtime (docs/cpu-adaptations.md, "container"):
* no network namespace: the container shares the host's loopback (binding addresses are the pod
  IP, adaptations.bind_pod_ip), as the process pods do;
* no cgroups (crun's --cgroup-manager=disabled): resources are not enforced. crun 1.8 refuses this
  host's mixed cgroup v1/v2 layout, so it runs in a mount namespace without the v2 hierarchy;
* the `kubernetes` Service is the API server's loopback address (KUBERNETES_SERVICE_HOST);
* emptyDir sizeLimit and seccomp profiles are not applied; exec probes run on the host.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .adaptations import bind_pod_ip
from .bundle import ContainerConfigError, Request, argv, prepare_bundle
from .crun import Runtime
from .images import Image, find_image
from .unpack import Unpacked, image_config, shared_cache
from .volumes import PodVolumes, pod_dir

# A token of the pod's ServiceAccount bound to the pod: (pod, expirationSeconds, audience).
PodToken = Callable[[Mapping[str, Any], int, "str | None"], str]


@dataclass
class Node:
    """What the runner's pod workers need to run containers of built images."""

    state_dir: Path  # unpacked images, crun's state and the bundles live under it
    apiserver_port: int
    pod_token: PodToken
    images: Path | None = None  # default: images_dir()

    def __post_init__(self) -> None:
        self.unpacked = Unpacked(self.state_dir / "images", shared=shared_cache())
        self.runtime = Runtime(self.state_dir / "crun")

    def image(self, spec: Mapping[str, Any]) -> Image | None:
        return find_image(spec.get("image"), self.images)

    def command(
        self,
        pod: Mapping[str, Any],
        spec: Mapping[str, Any],
        env: Mapping[str, str],
        mounts: PodVolumes,
        pod_ip: str,
    ) -> list[str]:
        """Prepare the container's bundle; the command that runs it. `spec`'s command and args
        are expanded already."""
        image = self.image(spec)
        if image is None:
            raise ContainerConfigError(f"image {spec.get('image')} is not built here")
        unpacked = self.unpacked.get(image)
        args = bind_pod_ip(argv(spec, image_config(unpacked)), pod_ip)
        # What a kubelet sets for the `kubernetes` Service; its ClusterIP is data only here, so
        # the API server's own loopback address (docs/cpu-adaptations.md, "container").
        env = {
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": str(self.apiserver_port),
            **env,
        }
        meta = pod["metadata"]
        bundle = pod_dir(self.state_dir, meta["uid"]) / "bundles" / str(spec["name"])
        prepare_bundle(unpacked, bundle, Request(pod, spec, args, env, mounts))
        return self.runtime.run_argv(bundle, f"{meta['uid']}-{spec['name']}")
