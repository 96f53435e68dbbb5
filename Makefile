# uplink — build, lab and test entry points. The README names `make lab` and `make test`.
SHELL := /bin/bash
TARGET := x86_64-unknown-linux-gnu
STATIC_FLAGS := -C target-feature=+crt-static
TARGET_DIR := $(or $(CARGO_TARGET_DIR),target)
STATIC_BIN := $(TARGET_DIR)/$(TARGET)/release/uplink
# The node's network (nmstate) and the Kubernetes source (kube): in the static binary, the image,
# Nix, and the host tests that need them, which share this one feature set (one build).
FEATURES := netconf kubernetes
# Debian packages: the lab needs FRR; the tests need every peer implementation and the tools
# that build the namespaces, a Prometheus server to scrape the metrics endpoint and
# systemd-journald to receive the logs (tests/observability.rs).
LAB_PKGS := frr iproute2 procps openssl
TEST_PKGS := $(LAB_PKGS) bird2 gobgpd exabgp nftables tcpdump psmisc python3 iputils-ping iputils-arping ndisc6 curl network-manager dbus prometheus systemd

.PHONY: all build static lab lab-down test unit interop fuzz fuzz-smoke lint deps-lab deps-test bench bench-bfd bench-fib bench-failover bench-k8s bench-l2

all: build

build:
	cargo build --release

# The one static executable (glibc, statically linked; the musl target is not installed here),
# with the node-network feature (nmstate: NetworkManager over D-Bus, and kernel mode) and the
# Kubernetes source.
static:
	RUSTFLAGS="$(STATIC_FLAGS)" cargo build --release --target $(TARGET) -p uplink --bin uplink --features "$(FEATURES)"
	@file $(STATIC_BIN) 2>/dev/null || true

deps-lab:
	@./scripts/apt-install $(LAB_PKGS)

deps-test:
	@./scripts/apt-install $(TEST_PKGS)

lab: deps-lab static testenv
	./lab/lab.sh up $(STATIC_BIN)

lab-down:
	./lab/lab.sh down

lint:
	cargo fmt --all --check
	cargo clippy --all-targets -- -D warnings
	cargo clippy -p uplink --all-targets --features "$(FEATURES)" -- -D warnings

# Every tier that exists: unit + interop (network namespaces with real FRR, BIRD, GoBGP,
# ExaBGP) via cargo, then a short fuzz smoke run.
#
# Three builds the later tiers need run at the lowest priority beside the host tiers, which
# mostly wait on sessions and timers: they take the idle CPU and yield to them. Each is about
# five minutes of both cores: the fuzz targets (their own target directory and flags), the test
# control plane (Go) and the node image's static uplink (its own target triple). fuzz-smoke,
# test-kubernetes and the image then find them built: cargo's lock on a target directory and
# k8s/testenv/build.sh's own lock make them wait for a build still running, and a build that
# failed fails again there, with its errors.
FUZZ_PREBUILD_LOG := $(TARGET_DIR)/fuzz-prebuild.log
TESTENV_PREBUILD_LOG := $(TARGET_DIR)/testenv-prebuild.log
STATIC_PREBUILD_LOG := $(TARGET_DIR)/static-prebuild.log
test: deps-test lint
	mkdir -p $(TARGET_DIR) && FUZZ_BUILD_ONLY=1 nice -n 19 ./scripts/fuzz $(FUZZ_TARGETS) \
		</dev/null >$(FUZZ_PREBUILD_LOG) 2>&1 &
	nice -n 19 ./k8s/testenv/build.sh </dev/null >$(TESTENV_PREBUILD_LOG) 2>&1 &
	nice -n 19 ./image/build-uplink.sh </dev/null >$(STATIC_PREBUILD_LOG) 2>&1 &
	cargo test --workspace --exclude uplink-vm-tests --no-fail-fast -- --test-threads=4
	$(MAKE) test-netconf
	$(MAKE) test-kubernetes
	$(MAKE) fuzz-smoke
	$(MAKE) nix-check
	$(MAKE) ansible-check
	$(MAKE) vm-test
	$(MAKE) image-test

# The node's network against a real NetworkManager on a private D-Bus (daemon/tests/netconf.rs).
# A build of its own with the features: nmstate and kube stay out of the other builds.
.PHONY: test-netconf
test-netconf:
	cargo test -p uplink --features "$(FEATURES)" --test netconf -- --test-threads=1

# The Kubernetes source against a real kube-apiserver, etcd and FRR (daemon/tests/kubernetes.rs).
.PHONY: test-kubernetes
test-kubernetes: testenv
	cargo test -p uplink --features "$(FEATURES)" --test kubernetes -- --test-threads=1

# The test control plane (k8s/testenv): kube-apiserver, kubectl and etcd built with Go from the
# modules its go.mod pins; Go's caches make a second build take seconds.
.PHONY: testenv
testenv:
	./k8s/testenv/build.sh

FUZZ_TARGETS := $(notdir $(basename $(wildcard daemon/fuzz/fuzz_targets/*.rs)))
FUZZ_SECONDS ?= 20

# One target per core at a time.
fuzz-smoke:
	@FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_JOBS=$$(nproc) ./scripts/fuzz $(FUZZ_TARGETS)

fuzz:
	@FUZZ_SECONDS=$${FUZZ_SECONDS:-600} ./scripts/fuzz $(FUZZ_TARGETS)

# The BGP ingest benchmark (docs/BENCHMARKS.md): uplink, BIRD 2 and FRR bgpd under the same
# injector, in network namespaces. Needs root. RUNS, V4_COUNT, V6_COUNT, DAEMONS tune it.
bench:
	@./scripts/apt-install frr bird2 jq iproute2
	cargo build --release -p uplink --bin uplink
	cargo build --release -p uplink-inject
	./bench/ingest.sh

# BFD detection time, uplink vs FRR bfdd, and a 10-minute hold under CPU load (root; not part
# of `make test`). TRIALS, INTERVALS and HOLD_SECONDS tune it; see bench/bfd.sh.
bench-bfd: deps-test
	cargo build -p uplink --bin uplink
	cp $${CARGO_TARGET_DIR:-target}/debug/uplink /tmp/uplink-bench-bfd
	./bench/bfd.sh /tmp/uplink-bench-bfd

# FIB install/remove rates against `ip -batch` and BIRD 2's kernel protocol (needs root; a few
# minutes; not part of `make test`). FIB_COUNTS overrides the route counts.
FIB_COUNTS ?= 100000 500000 1000000
bench-fib: deps-test
	./bench/fib.sh $(FIB_COUNTS)

# ECMP failover (prefix-independent convergence), uplink vs BIRD 2 vs FRR in the same run: two
# upstreams send the same routes, one session is cut (docs/BENCHMARKS.md; root; minutes; not
# part of `make test`). FAILOVER_COUNTS overrides the route counts; DAEMONS picks daemons.
FAILOVER_COUNTS ?= 100000 500000 1000000
bench-failover: deps-test
	cargo build --release -p uplink --bin uplink
	cargo build --release -p uplink-inject
	./bench/failover.sh $(FAILOVER_COUNTS)

# The Kubernetes source at a cluster's size: 10,000 Services with 50,000 endpoints over 500 Nodes
# in the test apiserver, uplink (release build) and FRR (docs/BENCHMARKS.md; root; about 15
# minutes; not part of `make test`). BENCH_SERVICES and BENCH_NODES change the size.
bench-k8s: deps-test testenv
	@./scripts/apt-install curl
	cargo build --release -p uplink --bin uplink --features "$(FEATURES)"
	cp $(TARGET_DIR)/release/uplink /tmp/uplink-bench-k8s
	UPLINK_BIN=/tmp/uplink-bench-k8s cargo test -p uplink --features "$(FEATURES)" \
		--test kubernetes_bench -- --ignored --nocapture

# Layer 2 mode at scale (daemon/tests/l2_bench.rs, docs/BENCHMARKS.md): ARP answers against the
# kernel's, 10,000 addresses' memory, failover between three nodes. Needs root.
bench-l2: deps-test
	cargo build --release -p uplink --bin uplink
	cp $(TARGET_DIR)/release/uplink /tmp/uplink-bench-l2
	UPLINK_BIN=/tmp/uplink-bench-l2 cargo test -p uplink --test l2_bench -- --ignored --nocapture

# Nix files (flake.nix, nix/): every .nix file parsed, the pure pieces evaluated and the VM
# test's uplink settings run through `uplink check`. Nix packages cannot be fetched on these
# machines, so nothing is built with Nix here (nix/README.md).
.PHONY: nix-check
nix-check:
	@./scripts/apt-install nix-bin shellcheck python3
	./scripts/nix-check

# Ansible content (ansible/): the role's filter tests, ansible-lint (production profile),
# --syntax-check of the playbooks, the seed-lab inventory's configs rendered by the role and
# checked by this tree's uplink, and the whole role on a stand-in node (a scratch directory, a
# stand-in systemctl and uplink: ansible/tests/run.sh). The VM tier runs the playbooks for real.
ANSIBLE_PKGS := ansible-core ansible-lint python3
.PHONY: ansible-check
ansible-check:
	@./scripts/apt-install $(ANSIBLE_PKGS)
	cargo build -p uplink --bin uplink
	./ansible/tests/run.sh $(TARGET_DIR)/debug/uplink

# VM tests (issue #6, vm-tests/): a ToR VM (Debian + FRR) and two worker VMs (the node image
# running uplink) under QEMU TCG, in a network namespace of their own (root; about 30 min on two
# cores once the image exists, 19 of them the Ansible rollout; measured 1736 s and 1763 s). `make image` builds this
# tree's static uplink (reproducibly) and rebuilds the image only when it or the image inputs
# changed. No backtrace: the harness's assert says which scenarios failed and why, and a
# backtrace would push that out of the last lines a CI log keeps.
VM_TEST_PKGS := qemu-system-x86 openssh-client dosfstools mtools iproute2 ansible-core binutils
.PHONY: vm-test
vm-test:
	@./scripts/apt-install $(VM_TEST_PKGS)
	$(MAKE) image
	UPLINK_IMAGE_OUT=$${IMAGE_OUT:-$(CURDIR)/image/out} \
	  RUST_BACKTRACE=0 cargo test -p uplink-vm-tests -- --nocapture --test-threads=1

# Node OS image (image/README.md): kernel + initramfs root, iPXE script, qcow2, SHA256SUMS in
# image/out. image-verify builds twice and compares; image-test PXE-boots it under QEMU (TCG).
.PHONY: image image-lock image-verify image-test
image:
	./image/build.sh
image-lock:
	./image/build.sh --update-lock
image-verify:
	./image/verify.sh
image-test:
	./image/pxe-test.sh
