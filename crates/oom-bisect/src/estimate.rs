//! An analytic estimate of training memory per stage: the tensors a stage keeps for backward, plus
//! parameters, gradients and optimizer state. `inspect` prints it as a guide; the hidden
//! `--fake-trials` flag answers trials from it so the search and the CLI can be tested without running
//! a model. It is an estimate: oom-bisect's answers come from measured trials.

use crate::settings::DeviceSettings;
use deeplab::{Architecture, Config, Optimizer, Phase, Precision};
use oom_trial::{ChildExit, OomInfo, StageMemory, StepRecord, TrialOutcome, TrialReport};

/// Estimated bytes per stage.
#[derive(Debug, Clone)]
pub struct StageEstimate {
    pub id: String,
    pub shape: [usize; 4],
    /// Activations this stage keeps alive for backward.
    pub saved_bytes: u64,
}

pub fn dtype_bytes(p: Precision) -> u64 {
    match p {
        Precision::F32 => 4,
        Precision::F16 | Precision::Bf16 => 2,
    }
}

/// Activations kept per stage, in elements times the float size.
pub fn stages(arch: &Architecture, config: &Config) -> Vec<StageEstimate> {
    let e = dtype_bytes(config.train.precision);
    let m = &arch.config;
    let b = arch.batch as u64;
    let [h, w] = arch.input;
    let hw = |s: usize| (h / s * (w / s)) as u64;
    let mut out = Vec::new();
    for st in &arch.stages {
        let [_, c, sh, sw] = st.shape;
        let px = (sh * sw) as u64;
        let elems: u64 = match st.id.as_str() {
            // conv1 input, BN input and ReLU output at H/2, max-pool output at H/4.
            "backbone.stem" => 3 * hw(1) + 3 * 64 * hw(2) + 64 * hw(4),
            id if id.starts_with("backbone.layer") => {
                let layer = id.as_bytes()[14] - b'1';
                let k: usize = id.rsplit('.').next().unwrap().parse().unwrap_or(0);
                let spec = arch.blocks[layer as usize][k];
                if arch.is_identity(id) {
                    0
                } else {
                    let p = spec.planes as u64;
                    let body = if m.backbone.bottleneck() {
                        3 * p + 3 * p + 3 * 4 * p
                    } else {
                        3 * p + 3 * p
                    };
                    let down = if spec.downsample { 2 * c as u64 } else { 0 };
                    px * (body + down + c as u64)
                }
            }
            "aspp" if !arch.aspp_is_identity() => {
                let ch = m.aspp_channels as u64;
                let branches = 5 - arch
                    .identity
                    .iter()
                    .filter(|i| i.starts_with("aspp."))
                    .count() as u64;
                let sep = if m.separable { 2 } else { 1 };
                px * (branches * 3 * ch * sep + branches * ch + 4 * ch)
            }
            "attention" if !arch.is_identity("attention") => {
                let n = px;
                let heads = m.attention_heads as u64;
                // q, k, v, context, output; attention scores and their softmax per head.
                n * c as u64 * 5 + 2 * heads * n * n
            }
            "decoder" if !arch.is_identity("decoder") => {
                let low = arch.low_level as u64;
                px * (3 * low + arch.aspp_out as u64 * 2 + low + 3 * 256 * 2)
            }
            // Logits, upsampled logits, log-softmax.
            "classifier" => {
                let k = m.classes as u64;
                k * hw(arch.logits_stride) + 2 * k * px
            }
            _ => 0,
        };
        out.push(StageEstimate {
            id: st.id.clone(),
            shape: st.shape,
            saved_bytes: elems * b * e,
        });
    }
    out
}

/// Parameters × (weights, gradients, optimizer state) in bytes, by phase.
pub fn fixed_bytes(params: u64, config: &Config, phase: Phase) -> u64 {
    let e = dtype_bytes(config.train.precision);
    let states = match config.train.optimizer {
        Optimizer::Sgd => 1,
        Optimizer::Adamw => 2,
    };
    match phase {
        Phase::Forward => params * e,
        Phase::Backward => params * e * 2,
        Phase::Step => params * e * (2 + states),
    }
}

/// A trial answered by the estimate (for tests of the search and the CLI; never the real thing).
pub fn fake_trial(config: &Config, device: &DeviceSettings) -> TrialReport {
    let arch = Architecture::new(config).expect("validated before a trial");
    let params = approx_params(&arch);
    let scale: f64 = std::env::var("OOM_BISECT_FAKE_SCALE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1.0);
    let ceiling = device.ceiling_bytes.unwrap_or(u64::MAX);
    let est = stages(&arch, config);
    let fixed = fixed_bytes(params, config, config.train.phase);
    let mut stages_mem = vec![];
    let mut acc = fixed;
    let mut oom = None;
    for (i, s) in est.iter().enumerate() {
        if !arch.runs(i) {
            break;
        }
        let saved = if config.train.checkpointing {
            s.saved_bytes / 3
        } else {
            s.saved_bytes
        };
        acc += (saved as f64 * scale) as u64;
        if acc > ceiling && oom.is_none() {
            oom = Some(OomInfo {
                phase: Some(Phase::Forward),
                stage: Some(s.id.clone()),
                step: Some(0),
                bytes: Some(s.saved_bytes),
                message: "fake trial: estimate past the ceiling".into(),
            });
            break;
        }
        stages_mem.push(StageMemory {
            step: 0,
            phase: Phase::Forward,
            name: s.id.clone(),
            in_use_bytes: acc,
            device_bytes: acc,
            seconds: 0.0,
        });
    }
    // Backward holds the activations and the gradients of the largest ones at once.
    let peak = if config.train.phase == Phase::Forward {
        acc
    } else {
        acc + (acc - fixed) / 4
    };
    if oom.is_none() && peak > ceiling {
        oom = Some(OomInfo {
            phase: Some(Phase::Backward),
            stage: Some("backward".into()),
            step: Some(0),
            bytes: None,
            message: "fake trial: estimate past the ceiling".into(),
        });
    }
    TrialReport {
        outcome: if oom.is_some() {
            TrialOutcome::Oom
        } else {
            TrialOutcome::Fits
        },
        backend: Some(device.backend),
        device: Some("fake (analytic estimate)".into()),
        ceiling_bytes: device.ceiling_bytes,
        context_bytes: Some(0),
        peak_bytes: oom.is_none().then_some(peak),
        peak_in_use_bytes: oom.is_none().then_some(peak),
        base_bytes: Some(fixed),
        params: Some(params as usize),
        stages: stages_mem,
        steps: vec![StepRecord {
            step: 0,
            seconds: 0.0,
            in_use_after_bytes: fixed,
            loss: 0.0,
        }],
        leak_bytes_per_step: None,
        oom,
        error: None,
        exit: ChildExit::Code(0),
        wall_seconds: 0.0,
        ready_seconds: None,
        built_seconds: None,
    }
}

/// Parameters from the architecture alone (cheap; within a few percent of the exact count).
pub fn approx_params(arch: &Architecture) -> u64 {
    let e = arch.config.backbone.expansion() as u64;
    let mut p: u64 = 3 * 64 * 49 + 128;
    for (i, layer) in arch.blocks.iter().enumerate() {
        for (k, s) in layer.iter().enumerate() {
            if arch.is_identity(&format!("backbone.{}.{k}", deeplab::arch::LAYERS[i])) {
                continue;
            }
            let (inp, pl) = (s.inplanes as u64, s.planes as u64);
            p += if e == 4 {
                inp * pl + pl * pl * 9 + pl * pl * 4
            } else {
                inp * pl * 9 + pl * pl * 9
            };
            if s.downsample {
                p += inp * pl * e;
            }
        }
    }
    let c = arch.config.aspp_channels as u64;
    let high = 512 * e;
    if !arch.aspp_is_identity() {
        p += high * c * (2 + 27) + 5 * c * c;
    }
    p += (arch.aspp_out as u64 + 48) * 256 * 9 + 256 * 256 * 9 + 256 * arch.config.classes as u64;
    if arch.config.attention_heads > 0 {
        p += 4 * (arch.aspp_out as u64).pow(2);
    }
    p
}
