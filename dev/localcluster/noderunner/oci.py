"""Containers whose image was built here (`make images`: OCI archives under build/images), run with
a real OCI runtime (crun) instead of as host processes, so what the pod spec says about the
container itself is exercised as a kubelet would: its image's files and user, its command, args
and env as rendered, its securityContext (user, group, read-only root filesystem, capabilities,
no privilege escalation) and its volumes mounted where the pod mounts them.

Which images: a container image `REF` runs here when one of the archives of `RUN_FROM_IMAGE` in the
images directory names `REF` (the `org.opencontainers.image.ref.name` annotation `make images`
writes), e.g. `docker.io/llmfleet/operator:0.2.0` -> build/images/operator.oci.tar.
`REPO@sha256:...` matches the archive of that repository whose manifest has that digest. Anything
else is not an image of this machine: the runner runs it as before (a process) or rejects the pod.
The router's archive is not among them (yet): the node runner runs router pods from the host's
router virtualenv, whose path its router adaptation writes into the command, which a container of
the image lacks.

What differs from a kubelet's runtime (docs/cpu-adaptations.md, "container"):
* no network namespace: the container shares the host's loopback (binding addresses are the pod
  IP, adaptations.bind_pod_ip), as the process pods do;
* no cgroups (crun's --cgroup-manager=disabled): resources are not enforced. crun 1.8 refuses this
  host's mixed cgroup v1/v2 layout, so it runs in a mount namespace without the v2 hierarchy;
* the `kubernetes` Service is the API server's loopback address (KUBERNETES_SERVICE_HOST);
* emptyDir sizeLimit and seccomp profiles are not applied; exec probes run on the host.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tarfile
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .adaptations import bind_pod_ip
from .volumes import PodVolumes, pod_dir

REPO = Path(__file__).resolve().parents[3]
REF_ANNOTATION = "org.opencontainers.image.ref.name"
CGROUP_V2 = Path("/sys/fs/cgroup/unified")


class ContainerConfigError(Exception):
    """The container cannot be created as specified (a kubelet's CreateContainerConfigError)."""


def images_dir() -> Path:
    """Where `make images` writes its archives (dev/images/build.sh's LLMFLEET_IMAGES_OUT)."""
    return Path(os.environ.get("LLMFLEET_IMAGES_OUT", REPO / "build" / "images"))


@dataclass(frozen=True)
class Image:
    ref: str  # the name inside the archive
    archive: Path
    digest: str  # the manifest's, sha256:...


_index_cache: dict[Path, tuple[float, list[Image]]] = {}
_index_lock = threading.Lock()


def _archive_images(archive: Path) -> list[Image]:
    mtime = archive.stat().st_mtime
    with _index_lock:
        cached = _index_cache.get(archive)
        if cached and cached[0] == mtime:
            return cached[1]
    with tarfile.open(archive) as tar:
        index = tar.extractfile("index.json")
        manifests = json.load(index)["manifests"] if index else []
    found = [
        Image(m["annotations"][REF_ANNOTATION], archive, m["digest"])
        for m in manifests
        if REF_ANNOTATION in (m.get("annotations") or {})
    ]
    with _index_lock:
        _index_cache[archive] = (mtime, found)
    return found


def _normalise(ref: str) -> str:
    """Docker's short names: `llmfleet/operator:1` is `docker.io/llmfleet/operator:1`."""
    first = ref.split("/", 1)[0]
    if "/" not in ref:
        return f"docker.io/library/{ref}"
    if "." not in first and ":" not in first and first != "localhost":
        return f"docker.io/{ref}"
    return ref


# The archives whose images pods run from (see the module docstring for why not the router's).
RUN_FROM_IMAGE = ("operator.oci.tar",)


def find_image(ref: str | None, directory: Path | None = None) -> Image | None:
    """The built image `ref` names, or None."""
    if not ref:
        return None
    want = _normalise(ref)
    repository, _, digest = want.partition("@")
    folder = directory or images_dir()
    for archive in [folder / name for name in RUN_FROM_IMAGE if (folder / name).is_file()]:
        with contextlib.suppress(OSError, tarfile.TarError, ValueError, KeyError):
            for image in _archive_images(archive):
                name = _normalise(image.ref)
                if name == want or (
                    digest and image.digest == digest and _repo(name) == repository
                ):
                    return image
    return None


def _repo(ref: str) -> str:
    """`host/path:tag` without the tag."""
    head, _, tail = ref.rpartition("/")
    return f"{head}/{tail.split(':', 1)[0]}"


def stale_built_images(pod: Mapping[str, Any], directory: Path | None = None) -> dict[str, str]:
    """Containers whose image names a repository built here but a tag or digest that is not (a
    rebuilt image under an older pod template), each with the reference that is built now."""
    folder = directory or images_dir()
    built: dict[str, str] = {}
    for archive in [folder / name for name in RUN_FROM_IMAGE if (folder / name).is_file()]:
        with contextlib.suppress(OSError, tarfile.TarError, ValueError, KeyError):
            for image in _archive_images(archive):
                built[_repo(_normalise(image.ref))] = f"{image.ref}@{image.digest}"
    stale = {}
    for c in pod["spec"].get("containers") or []:
        ref = c.get("image")
        if not ref or find_image(ref, directory):
            continue
        repository = _repo(_normalise(ref).partition("@")[0])
        if repository in built:
            stale[c["name"]] = built[repository]
    return stale


def runs_built_images(pod: Mapping[str, Any], directory: Path | None = None) -> bool:
    """Every container of the pod has a built image (the runner admits such a pod)."""
    containers = pod["spec"].get("containers") or []
    return bool(containers) and all(find_image(c.get("image"), directory) for c in containers)


class Unpacked:
    """Images unpacked once per manifest digest under `cache` (umoci unpack): a root filesystem
    that every container of that image shares read-only, and umoci's runtime config as the
    template of each container's."""

    def __init__(self, cache: Path) -> None:
        self.cache = cache
        self._lock = threading.Lock()

    def get(self, image: Image) -> Path:
        target = self.cache / image.digest.replace(":", "_")
        with self._lock:
            if (target / "image-config.json").is_file():
                return target
            self.cache.mkdir(parents=True, exist_ok=True)
            work = self.cache / f".unpacking-{os.getpid()}"
            shutil.rmtree(work, ignore_errors=True)
            (work / "layout").mkdir(parents=True)
            try:
                subprocess.run(
                    ["tar", "-C", str(work / "layout"), "-xf", str(image.archive)], check=True
                )
                subprocess.run(
                    [
                        "umoci",
                        "unpack",
                        "--image",
                        f"{work / 'layout'}:{image.ref}",
                        str(work / "bundle"),
                    ],
                    check=True,
                    capture_output=True,
                )
                bundle = work / "bundle"
                (bundle / "image-config.json").write_text(json.dumps(_image_config(image)))
                shutil.rmtree(target, ignore_errors=True)
                bundle.rename(target)
            finally:
                shutil.rmtree(work, ignore_errors=True)
            return target


def _image_config(image: Image) -> dict[str, Any]:
    """The image's config (Entrypoint, Cmd, Env, User, WorkingDir)."""

    def blob(digest: str) -> Any:
        member = tar.extractfile(f"blobs/{digest.replace(':', '/')}")
        assert member is not None
        return json.load(member)

    with tarfile.open(image.archive) as tar:
        manifest = blob(image.digest)
        config: dict[str, Any] = blob(manifest["config"]["digest"]).get("config") or {}
    return config


def argv(spec: Mapping[str, Any], image_config: Mapping[str, Any]) -> list[str]:
    """Kubernetes' rule: `command` replaces the image's Entrypoint (and drops its Cmd), `args`
    replace its Cmd; both after $(VAR) expansion (done by the caller)."""
    command = list(spec.get("command") or [])
    args = list(spec.get("args") or [])
    if command:
        return [*command, *args]
    return [*(image_config.get("Entrypoint") or []), *(args or image_config.get("Cmd") or [])]


def _security(pod: Mapping[str, Any], spec: Mapping[str, Any]) -> dict[str, Any]:
    """The container's securityContext over the pod's (the fields a container may override)."""
    pod_ctx = dict(pod["spec"].get("securityContext") or {})
    return {**pod_ctx, **(spec.get("securityContext") or {})}


@dataclass(frozen=True)
class Request:
    """One container to run: its pod, its spec, and what the runner made of them."""

    pod: Mapping[str, Any]
    spec: Mapping[str, Any]
    args: list[str]  # the process's argv
    env: Mapping[str, str]  # the pod's environment for it (the image's is added)
    mounts: PodVolumes  # mountPath -> host directory


def bundle_config(unpacked: Path, request: Request, rootfs: Path) -> dict[str, Any]:
    """The OCI runtime config of one container (from umoci's, which holds the image's user)."""
    pod, spec, env, mounts = request.pod, request.spec, request.env, request.mounts
    config: dict[str, Any] = json.loads((unpacked / "config.json").read_text())
    process = config["process"]
    security = _security(pod, spec)
    image_env = dict(e.split("=", 1) for e in process.get("env") or [] if "=" in e)
    process["terminal"] = False
    process["args"] = request.args
    # The image's environment, then what the pod sets (it wins, as with a kubelet).
    process["env"] = [f"{k}={v}" for k, v in {**image_env, **env}.items()]
    if spec.get("workingDir"):
        process["cwd"] = spec["workingDir"]
    user = process.setdefault("user", {"uid": 0, "gid": 0})
    if "runAsUser" in security:
        user["uid"] = int(security["runAsUser"])
    if "runAsGroup" in security:
        user["gid"] = int(security["runAsGroup"])
    if security.get("runAsNonRoot") and user["uid"] == 0:
        raise ContainerConfigError("container has runAsNonRoot and image will run as root")
    caps = security.get("capabilities") or {}
    if "ALL" in (caps.get("drop") or []):
        kept: list[str] = []
    else:
        kept = list(process.get("capabilities", {}).get("bounding") or [])
    kept += [f"CAP_{c}" for c in caps.get("add") or [] if f"CAP_{c}" not in kept]
    process["capabilities"] = {
        k: list(kept) for k in ("bounding", "effective", "permitted", "inheritable", "ambient")
    }
    process["noNewPrivileges"] = security.get("allowPrivilegeEscalation", True) is False or (
        process.get("noNewPrivileges", False)
    )
    config["root"] = {"path": str(rootfs), "readonly": bool(security.get("readOnlyRootFilesystem"))}
    config["hostname"] = pod["metadata"]["name"]
    linux = config["linux"]
    # The host's network: pods here bind loopback pod IPs, never a bridge.
    linux["namespaces"] = [ns for ns in linux["namespaces"] if ns["type"] != "network"]
    read_only = {m["mountPath"] for m in spec.get("volumeMounts") or [] if m.get("readOnly")}
    for path, source in sorted(mounts.paths.items()):
        mode = "ro" if path in read_only else "rw"
        config["mounts"].append(
            {"destination": path, "type": "bind", "source": source, "options": ["rbind", mode]}
        )
    return config


class Runtime:
    """crun, with its state under `root`."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _crun(self, *args: str) -> list[str]:
        return ["crun", "--root", str(self.root), "--cgroup-manager=disabled", *args]

    def run_argv(self, bundle: Path, container_id: str) -> list[str]:
        """The command that runs the container in the foreground: its exit status is the
        container's, and it passes SIGTERM on to the container's process."""
        self.root.mkdir(parents=True, exist_ok=True)
        # A container of this id left by a killed run would block the name.
        subprocess.run(
            self._crun("delete", "--force", container_id), capture_output=True, check=False
        )
        return self._wrap(self._crun("run", "--bundle", str(bundle), container_id))

    def exec_argv(self, container_id: str, *command: str) -> list[str]:
        """A command run in the running container, as its process's user (`kubectl exec`; crun's
        own default is root)."""
        user = self._state(container_id).get("user") or {"uid": 0, "gid": 0}
        who = f"{user['uid']}:{user['gid']}"
        return self._wrap(self._crun("exec", "--user", who, container_id, *command))

    def _wrap(self, run: list[str]) -> list[str]:
        # crun 1.8 refuses a host whose cgroup v2 hierarchy beside the v1 ones has controllers;
        # with cgroups disabled it needs neither, so it runs where that hierarchy is unmounted.
        if _hybrid_cgroups():
            return ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                    f'umount {CGROUP_V2} && exec "$@"', "sh", *run]  # fmt: skip
        return run

    def _state(self, container_id: str) -> dict[str, Any]:
        """crun's state of the container, with its process's user from its bundle."""
        out = subprocess.run(
            self._crun("state", container_id), capture_output=True, text=True, check=False
        )
        try:
            state: dict[str, Any] = json.loads(out.stdout)
            bundle = json.loads((Path(state["bundle"]) / "config.json").read_text())
        except (ValueError, KeyError, OSError):
            return {}
        return {**state, "user": bundle["process"].get("user")}

    def pid(self, container_id: str) -> int | None:
        """The container's main process, as the host sees it."""
        return int(self._state(container_id).get("pid") or 0) or None


def _hybrid_cgroups() -> bool:
    """cgroup v1 hierarchies with the v2 one mounted beside them (systemd's "hybrid" layout)."""
    out = subprocess.run(
        ["stat", "-fc", "%T", "/sys/fs/cgroup"], capture_output=True, text=True, check=False
    )
    return out.stdout.strip() != "cgroup2fs" and os.path.ismount(CGROUP_V2)


def prepare_bundle(unpacked: Path, bundle: Path, request: Request) -> None:
    """Write the container's bundle: its config.json, and its own copy of the image's root
    filesystem only where that is writable (a read-only one is shared)."""
    shutil.rmtree(bundle, ignore_errors=True)
    bundle.mkdir(parents=True)
    rootfs = unpacked / "rootfs"
    if not _security(request.pod, request.spec).get("readOnlyRootFilesystem"):
        subprocess.run(["cp", "-a", str(rootfs), str(bundle / "rootfs")], check=True)
        rootfs = bundle / "rootfs"
    config = bundle_config(unpacked, request, rootfs)
    (bundle / "config.json").write_text(json.dumps(config, indent=1))


def image_config(unpacked: Path) -> dict[str, Any]:
    config: dict[str, Any] = json.loads((unpacked / "image-config.json").read_text())
    return config


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
        self.unpacked = Unpacked(self.state_dir / "images")
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
