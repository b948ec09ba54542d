//! The model's memory estimate against measured peaks: real training steps on the CPU backend under a
//! counting allocator, for configs that cover every option the estimate models (both memory models,
//! BatchNorm kinds, the aux head, separable convolutions, attention, swapped decoder parts, phases, optimizers,
//! checkpointed blocks). One test in its own binary: the allocator's counters are global, so
//! nothing may run beside it in its process; it runs its cases in two processes of this binary at
//! once (`PART`), one per core.

use burn::backend::{Autodiff, Flex};
use deeplab::{Architecture, Config, Trainer};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// Counts live bytes and their peak (what `oom_trial::alloc` does in the real trial, without the
/// ceiling).
struct Counting;

static CURRENT: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let now = CURRENT.fetch_add(layout.size(), Relaxed) + layout.size();
        PEAK.fetch_max(now, Relaxed);
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        CURRENT.fetch_sub(layout.size(), Relaxed);
        // SAFETY: forwarded with the caller's pointer and layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

type B = Autodiff<Flex>;

const BASE: &str = r#"
[model]
backbone = "resnet18"
output_stride = 8
classes = 8
aspp_channels = 32
[data]
batch = 4
size = [96, 96]
[train]
steps = 2
"#;

/// Peak bytes of `steps` real training steps above what was live before the trainer existed.
fn measured(c: &Config) -> u64 {
    let device = Default::default();
    let before = CURRENT.load(Relaxed);
    PEAK.store(before, Relaxed);
    let mut t = Trainer::<B>::new(c, &device).unwrap();
    for _ in 0..c.steps() {
        t.step(&mut |_| {});
    }
    drop(t);
    (PEAK.load(Relaxed) - before) as u64
}

/// The variable a process of this binary reads for its share of the cases: `i/n`, every n-th case
/// from the i-th.
const PART: &str = "DEEPLAB_ESTIMATE_TEST_PART";

const TEST: &str = "estimate_is_within_15_percent_of_measured_peaks";

/// The test's cases in two processes of this binary side by side, each with its own counters.
fn in_two_processes() {
    let exe = std::env::current_exe().unwrap();
    let parts: Vec<_> = (0..2)
        .map(|i| {
            std::process::Command::new(&exe)
                .args(["--exact", TEST, "--nocapture", "--test-threads", "1"])
                .env(PART, format!("{i}/2"))
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for p in parts {
        let o = p.wait_with_output().unwrap();
        let log = String::from_utf8_lossy(&o.stderr);
        eprintln!("{log}");
        assert!(o.status.success(), "a part failed:\n{log}");
        assert!(log.contains(" measured "), "the part ran no case:\n{log}");
    }
}

#[test]
fn estimate_is_within_15_percent_of_measured_peaks() {
    let Ok(part) = std::env::var(PART) else {
        in_two_processes();
        return;
    };
    let (i, n) = part.split_once('/').unwrap();
    let (i, n): (usize, usize) = (i.parse().unwrap(), n.parse().unwrap());
    const BURN: &str = "device.memory_model=\"burn\"";
    let cases: &[&[&str]] = &[
        // The pytorch memory model (the default).
        &[],
        &["model.aux_head=true"],
        &["model.separable=true"],
        &["model.attention_heads=4"],
        &["model.identity=[\"decoder\"]"],
        &["model.identity=[\"decoder.project\", \"decoder.fuse.1\"]"],
        &["model.backbone=\"resnet50\"", "model.aux_head=true"],
        &["train.phase=\"forward\""],
        &["train.optimizer=\"adamw\"", "model.attention_heads=2"],
        &["model.identity=[\"aspp.pool\", \"backbone.layer4.1\"]"],
        // Activations most of the peak.
        &["data.size=[192, 192]", "model.aux_head=true"],
        // Checkpointed blocks (the pytorch model's torch.utils.checkpoint).
        &[
            "data.size=[192, 192]",
            "model.aux_head=true",
            "train.checkpointing=true",
        ],
        &["train.checkpointing=true", "model.backbone=\"resnet50\""],
        // burn's.
        &[BURN],
        &[BURN, "model.batch_norm=\"lean\""],
        &[BURN, "model.aux_head=true"],
        &[BURN, "model.separable=true"],
        &[
            BURN,
            "model.identity=[\"decoder.project\", \"decoder.fuse.1\"]",
        ],
        &[
            BURN,
            "model.backbone=\"resnet50\"",
            "model.batch_norm=\"lean\"",
            "model.aux_head=true",
        ],
        &[BURN, "train.optimizer=\"adamw\"", "model.attention_heads=2"],
    ];
    let base = Config::from_toml_str(BASE).unwrap();
    let mut worst = 0.0f64;
    let mut report = String::new();
    for sets in cases.iter().skip(i).step_by(n) {
        let c = base.with_overrides(sets).unwrap();
        let arch = Architecture::new(&c).unwrap();
        let peak = arch.memory_estimate(&c).peak;
        let est = peak.total();
        let got = measured(&c);
        let ratio = est as f64 / got as f64;
        worst = worst.max((ratio - 1.0).abs());
        report.push_str(&format!(
            "{:>10} est {:>10} measured  {ratio:.3}  activations {:.0}%  {sets:?}\n",
            est,
            got,
            100.0 * peak.activations as f64 / est as f64
        ));
    }
    eprintln!("{report}");
    assert!(
        worst <= 0.15,
        "estimate off by {:.0}%:\n{report}",
        worst * 100.0
    );
}
