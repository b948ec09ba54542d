# oom-bisect: common tasks. `just --list` shows them.

# Build the release binary (CUDA support included; runs on the CPU backend without a GPU).
build:
    cargo build --release

# The same with burn-cuda's autotune: faster kernels, but every new shape compiles and benchmarks
# every candidate kernel first (minutes per trial on the H200).
build-autotune:
    cargo build --release --features autotune

# Run the test suite, as CI does (CPU backend, no GPU needed), and the vendored crates' own tests of
# their patches.
test:
    cargo test --release --workspace
    cargo test --manifest-path vendor/cubecl-runtime/Cargo.toml --target-dir target/vendor-tests --lib oom_bisect
    cargo test --manifest-path vendor/burn-flex/Cargo.toml --target-dir target/vendor-tests --lib row_walk

# Formatting and lints, as CI checks them.
lint:
    python3 tools/architecture.py
    python3 tools/vendor-check.py
    cargo fmt --all -- --check
    cargo clippy --workspace --all-targets -- -D warnings
    RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --workspace --quiet

# Diagnose the quickstart config on the default backend (CPU when there is no GPU).
bisect config="configs/quickstart.toml" *args="":
    cargo run --release -- bisect --config {{config}} {{args}}

# One measured trial with its per-stage memory table.
trial config="configs/quickstart.toml" *args="":
    cargo run --release -- trial --config {{config}} {{args}}

# Module tree, shapes, parameter counts and activation estimate of a config.
inspect config="configs/deeplabv3plus-r50-os8.toml":
    cargo run --release -- inspect --config {{config}}

# Time one diagnosis: trials per axis, per-trial overhead against the training steps.
bench config="configs/quickstart.toml" *args="":
    cargo run --release -- bench --config {{config}} --fresh {{args}}

# The same on the GPU: the forum scenario under a 24 GiB ceiling.
bench-gpu *args="":
    cargo run --release -- bench --config configs/forum-r101-os8-1024.toml --backend cuda --fresh {{args}}

# Trial counts of guided search against plain bisection on the shipped configs (fake trials).
bench-search:
    for c in configs/*.toml; do cargo run --release -q -- bench --config $c --fake-trials --fresh -q; done

# What burn's autodiff keeps for backward, op by op, measured on the CPU (why burn needs ~2x PyTorch).
saved-bytes:
    cargo run --release -p oom-trial --example saved_bytes
