"""The project's local Kubernetes control plane: upstream etcd, kube-apiserver,
kube-controller-manager, kube-scheduler and kwok fake GPU nodes, all on 127.0.0.1."""
