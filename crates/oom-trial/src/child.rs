//! The child side of a trial (`oom-bisect __trial`): one config on one device under one ceiling, N real
//! training steps, every measuring point reported as it is reached.
//!
//! Why a separate process: on burn-cuda 0.21 an out-of-memory is a panic on the device-runner thread,
//! the calling thread may carry on with zeros or wrong numbers, memory pools never shrink and the peak
//! cannot be reset. A fresh process is the only clean slate, and a dead one cannot lie.

mod meter;
mod signals;

use crate::emit::{emit, since_start};
use crate::faults::inject;
use crate::protocol::{exit, BackendKind, ChildEvent, Engine, Location, Request, Stage};
use anyhow::{anyhow, bail, Result};
use burn::backend::autodiff::checkpoint::strategy::BalancedCheckpointing;
use burn::backend::{Autodiff, Flex};
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::DType;
use deeplab::{Config, Phase, Point, Precision, Recompute, Trainer};
pub use meter::read_stream;
use meter::Meter;
use signals::{die_with_parent, install_panic_hook, panic_exit_code, PANICKED};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// The variable the vendored cubecl-runtime reads for the pools' layout (`pytorch` or `burn`).
#[cfg(feature = "cuda")]
const MEMORY_MODEL_ENV: &str = "OOM_BISECT_MEMORY_MODEL";

/// Room for the CPU trial's stream, in events (16 bytes each, mapped as they are noted): a
/// quickstart trial notes about 100,000.
const STREAM_ROOM: usize = 1 << 27;

/// Runs the child: reads the request, runs the trial, returns the exit code.
pub fn main(request: &str) -> i32 {
    crate::emit::start_clock();
    die_with_parent();
    install_panic_hook();
    emit(&ChildEvent::Place(crate::protocol::Place::here()));
    let req: Request = match serde_json::from_str(request) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("oom-bisect __trial: bad request: {e}");
            return exit::INCONCLUSIVE;
        }
    };
    if req.engine == Engine::Card {
        return crate::card_probe::answer_probe();
    }
    if req.engine == Engine::Estimate {
        crate::estimated::pretend_to_train();
        let answer = crate::estimated::answer(&req);
        answer.events.iter().for_each(emit);
        if !answer.stderr.is_empty() {
            eprintln!("{}", answer.stderr);
        }
        return answer.exit_code;
    }
    let result = std::panic::catch_unwind(AssertUnwindSafe(|| match &req.engine {
        Engine::Exec { command } => crate::exec::run(&req, command),
        _ => run(&req),
    }));
    if PANICKED.load(Ordering::SeqCst) {
        return panic_exit_code();
    }
    match result {
        Ok(Ok(())) => exit::FITS,
        Ok(Err(e)) => {
            eprintln!("oom-bisect __trial: {e:#}");
            exit::INCONCLUSIVE
        }
        Err(_) => panic_exit_code(),
    }
}

fn run(req: &Request) -> Result<()> {
    let config = Config::from_toml_str(&req.config).map_err(|e| anyhow!("config: {e}"))?;
    // Refuse bad ids before touching the device.
    deeplab::Architecture::new(&config).map_err(|e| anyhow!("config: {e}"))?;
    if let Engine::Stream { card } = &req.engine {
        return run_stream(&config, req, card);
    }
    match req.backend {
        BackendKind::Cpu => {
            if !crate::alloc::installed() {
                bail!("the counting allocator is not installed in this binary: the CPU ceiling cannot be enforced");
            }
            // One thread: what a trial allocates (each thread's scratch buffers) and in which
            // order is then the same on every host, and so is its stream's replay. Trials run
            // side by side instead, one per core. Set before burn starts rayon's pool.
            std::env::set_var("RAYON_NUM_THREADS", "1");
            let total = crate::device::host_total();
            let ceiling_bytes = req.ceiling.bytes(total);
            emit(&ChildEvent::Start {
                backend: BackendKind::Cpu,
                device: "cpu (burn-flex, one thread)".into(),
                ceiling_bytes,
                context_bytes: crate::alloc::in_use() as u64,
                total_bytes: total,
                seconds: since_start(),
            });
            crate::alloc::set_limit(ceiling_bytes as usize);
            let replay = config.device.memory_model() == deeplab::MemoryModel::Pytorch;
            if replay {
                crate::alloc::recorder::record(STREAM_ROOM);
            }
            let device = Default::default();
            let mut meter = Meter::Cpu { replay };
            if config.recompute() == Recompute::BurnBalanced {
                train::<Autodiff<Flex, BalancedCheckpointing>>(&config, &device, &mut meter, req)
            } else {
                train::<Autodiff<Flex>>(&config, &device, &mut meter, req)
            }
        }
        BackendKind::Cuda => run_cuda(&config, req),
    }
}

/// Points cubecl's compilation (PTX) and autotune caches at the directory the parent chose, so that
/// kernels compiled and tuned by one trial are reused by the next instead of compiled again in every
/// process. Must run before cubecl reads its configuration.
#[cfg(feature = "cuda")]
fn configure_kernel_cache() {
    use cubecl::config::cache::CacheConfig;
    use cubecl::config::{CubeClRuntimeConfig, RuntimeConfig};
    let Some(dir) = std::env::var_os(crate::cache::KERNEL_CACHE_ENV).filter(|d| !d.is_empty())
    else {
        return;
    };
    let dir = std::path::PathBuf::from(dir);
    if std::fs::create_dir_all(&dir).is_err() {
        return;
    }
    let mut c = CubeClRuntimeConfig::from_current_dir().override_from_env();
    c.compilation.cache = Some(CacheConfig::File(dir.join("compilation")));
    c.autotune.cache = CacheConfig::File(dir.join("autotune"));
    CubeClRuntimeConfig::set(c);
}

#[cfg(feature = "cuda")]
fn run_cuda(config: &Config, req: &Request) -> Result<()> {
    configure_kernel_cache();
    // Read once by the vendored cubecl-runtime when the device's pools are made (vendor/README.md):
    // set before anything touches the device. Always set, so that an inherited value cannot leak in.
    std::env::set_var(MEMORY_MODEL_ENV, config.device.memory_model().name());
    req.switches.apply_conv();
    let fusion = req.switches.fusion;
    use crate::cuda::{CudaCeiling, OwnContext};
    let ceiling = CudaCeiling::install(req.ceiling, OwnContext::Counted, req.ceiling_by)?;
    emit(&ChildEvent::Start {
        backend: BackendKind::Cuda,
        device: if fusion {
            ceiling.device_name.clone()
        } else {
            format!("{} (burn-cubecl without fusion)", ceiling.device_name)
        },
        ceiling_bytes: ceiling.ceiling_bytes,
        context_bytes: ceiling.context_bytes,
        total_bytes: ceiling.total_bytes,
        seconds: since_start(),
    });
    ask_cudnn(config);
    let device = burn_cuda::CudaDevice::default();
    let mut meter = Meter::Cuda {
        ceiling,
        device: device.clone(),
        peak: 0,
        replay: config.device.memory_model() == deeplab::MemoryModel::Pytorch,
    };
    train_on_cuda(config, &device, &mut meter, req)
}

/// Under the `pytorch` memory model, each convolution's stream gains the workspace requests
/// PyTorch's cuDNN path makes there, asked of this machine's cuDNN (`crate::cudnn`).
#[cfg(feature = "cuda")]
fn ask_cudnn(config: &Config) {
    if config.device.memory_model() == deeplab::MemoryModel::Pytorch {
        cubecl_runtime::memory_management::oom_bisect::set_workspaces(crate::cudnn::workspaces);
    }
}

/// The training on burn-cuda, fused or not, with burn's checkpointing strategy or without.
#[cfg(feature = "cuda")]
fn train_on_cuda(
    config: &Config,
    device: &burn_cuda::CudaDevice,
    meter: &mut Meter,
    req: &Request,
) -> Result<()> {
    use burn_cuda::Cuda;
    // Checkpointed blocks (the pytorch model) are the model's own doing; only burn's strategy is
    // a backend of its own.
    let balanced = config.recompute() == Recompute::BurnBalanced;
    match (req.switches.fusion, balanced) {
        (true, true) => train::<Autodiff<Cuda, BalancedCheckpointing>>(config, device, meter, req),
        (true, false) => train::<Autodiff<Cuda>>(config, device, meter, req),
        (false, balanced) => train_unfused(config, device, meter, req, balanced),
    }
}

/// A stream-only trial (`Engine::Stream`): the CUDA training issued on a virtual `card`, its
/// stream replayed under the ceiling. Nothing is compiled, launched or held on a GPU, so it runs
/// on any host, beside the GPU's own trials.
#[cfg(feature = "cuda")]
fn run_stream(config: &Config, req: &Request, card: &crate::card::CardProps) -> Result<()> {
    if config.device.memory_model() != deeplab::MemoryModel::Pytorch {
        bail!(
            "a stream-only trial is judged by replaying its stream through PyTorch's allocator:              it needs device.memory_model = \"pytorch\""
        );
    }
    std::env::set_var(MEMORY_MODEL_ENV, config.device.memory_model().name());
    req.switches.apply_conv();
    cubecl::cuda::oom_bisect::set_virtual_card(crate::card::virtual_card(card))
        .map_err(|_| anyhow!("a virtual card was set twice"))?;
    let ceiling_bytes = req.ceiling.bytes(card.total_bytes);
    emit(&ChildEvent::Start {
        backend: BackendKind::Cuda,
        device: card.label(),
        ceiling_bytes,
        context_bytes: card.context_bytes,
        total_bytes: card.total_bytes,
        seconds: since_start(),
    });
    ask_cudnn(config);
    let device = burn_cuda::CudaDevice::default();
    let mut meter = Meter::Stream {
        device: device.clone(),
        ceiling_bytes,
        context_bytes: card.context_bytes,
        peak: 0,
    };
    train_on_cuda(config, &device, &mut meter, req)
}

#[cfg(not(feature = "cuda"))]
fn run_stream(_: &Config, _: &Request, _: &crate::card::CardProps) -> Result<()> {
    bail!("this binary was built without the `cuda` feature")
}

/// burn-cuda without its fusion layer: every tensor operation is its own kernel.
#[cfg(feature = "unfused")]
type Unfused = burn_cubecl::CubeBackend<cubecl::cuda::CudaRuntime, f32, i32, u8>;

/// The trial on [`Unfused`]: a second instantiation of the whole model and its training, which
/// cost about three minutes of a first build on 2 cores (docs/performance.md), so only with the
/// `unfused` feature
/// (`device.fusion = false` is refused up front without it: `Switches`).
#[cfg(feature = "unfused")]
fn train_unfused(
    config: &Config,
    device: &burn_cuda::CudaDevice,
    meter: &mut Meter,
    req: &Request,
    balanced: bool,
) -> Result<()> {
    match balanced {
        true => train::<Autodiff<Unfused, BalancedCheckpointing>>(config, device, meter, req),
        false => train::<Autodiff<Unfused>>(config, device, meter, req),
    }
}

#[cfg(all(feature = "cuda", not(feature = "unfused")))]
fn train_unfused(
    _: &Config,
    _: &burn_cuda::CudaDevice,
    _: &mut Meter,
    _: &Request,
    _: bool,
) -> Result<()> {
    bail!("device.fusion = false needs a build with `--features unfused`")
}

#[cfg(not(feature = "cuda"))]
fn run_cuda(_: &Config, _: &Request) -> Result<()> {
    bail!("this binary was built without the `cuda` feature")
}

fn train<B: AutodiffBackend + deeplab::pytorch::PytorchOps>(
    config: &Config,
    device: &B::Device,
    meter: &mut Meter,
    req: &Request,
) -> Result<()> {
    // Pure low precision (or float64): every float in it. Autocast keeps f32 as the default (the
    // weights) and the model casts where PyTorch's autocast would.
    let dtype = match config.train.precision {
        Precision::F64 => Some(DType::F64),
        Precision::F16 => Some(DType::F16),
        Precision::Bf16 => Some(DType::BF16),
        Precision::F32 | Precision::MixedF16 | Precision::MixedBf16 => None,
    };
    if let Some(dtype) = dtype {
        burn::tensor::set_default_dtypes::<B>(device, dtype, DType::I32).map_err(|e| {
            anyhow!(
                "precision {} is not supported on the {} backend: {e:?}",
                config.train.precision.name(),
                req.backend.name()
            )
        })?;
    }
    let mut trainer = Trainer::<B>::new(config, device).map_err(|e| anyhow!("config: {e}"))?;
    if meter.computes_nothing() {
        trainer.reads_not_computed();
    }
    B::sync(device).map_err(|e| anyhow!("device sync failed: {e:?}"))?;
    let (in_use, _) = meter.read();
    emit(&ChildEvent::Built {
        in_use_bytes: in_use,
        params: deeplab::model::trainable_params(trainer.model()),
        seconds: since_start(),
    });
    if config.premade_state() {
        trainer.make_optimizer_state();
    }
    let mut check = 0.0;
    let mut step = 0;
    while !config.enough_steps(step, meter.peak(), meter.ceiling()) {
        let t0 = Instant::now();
        let r = trainer.step(&mut |p| {
            let (phase, stage) = match p {
                Point::Stage(id) => (Phase::Forward, Stage::Module(id.to_string())),
                Point::Loss => (Phase::Forward, Stage::Loss),
                Point::Backward => (Phase::Backward, Stage::Backward),
                Point::Optimizer => (Phase::Step, Stage::Optimizer),
            };
            inject(&req.fault, stage.name());
            if B::sync(device).is_err() || PANICKED.load(Ordering::SeqCst) {
                // Let the panic hook's watchdog end the process; do not measure garbage.
                std::thread::sleep(Duration::from_secs(10));
            }
            let (in_use_bytes, device_bytes) = meter.read();
            emit(&ChildEvent::Mark {
                at: Location { step, phase, stage },
                in_use_bytes,
                device_bytes,
                seconds: since_start(),
                events: Some(meter.events_noted()),
            });
        });
        B::sync(device).map_err(|e| anyhow!("device sync failed: {e:?}"))?;
        let seconds = t0.elapsed().as_secs_f64();
        let (in_use_bytes, _) = meter.read();
        emit(&ChildEvent::Step {
            step,
            seconds,
            in_use_bytes,
            loss: r.loss as f64,
        });
        check = r.check;
        step += 1;
    }
    if PANICKED.load(Ordering::SeqCst) {
        bail!("a thread panicked during the trial");
    }
    done(meter, req, check)
}

/// The trial's last events: its stream replayed, then what it measured.
fn done(meter: &mut Meter, req: &Request, check: f64) -> Result<()> {
    if meter.replays() {
        emit(&ChildEvent::Replayed(meter.replayed()?));
    }
    let peak_bytes = meter.peak();
    let peak_in_use_bytes = crate::alloc::peak() as u64;
    emit(&ChildEvent::Done {
        check,
        peak_bytes,
        peak_in_use_bytes: match req.backend {
            BackendKind::Cpu => peak_in_use_bytes,
            BackendKind::Cuda => 0,
        },
    });
    Ok(())
}
