//! The child side of a trial (`oom-bisect __trial`): one config on one device under one ceiling, N real
//! training steps, every measuring point reported as it is reached.
//!
//! Why a separate process: on burn-cuda 0.21 an out-of-memory is a panic on the device-runner thread,
//! the calling thread may carry on with zeros or wrong numbers, memory pools never shrink and the peak
//! cannot be reset. A fresh process is the only clean slate, and a dead one cannot lie.

use crate::classify::{classify_message, MessageKind};
use crate::emit::{emit, since_start};
use crate::faults::inject;
use crate::protocol::{exit, BackendKind, ChildEvent, Engine, Location, Request, Stage};
use anyhow::{anyhow, bail, Result};
use burn::backend::autodiff::checkpoint::strategy::BalancedCheckpointing;
use burn::backend::{Autodiff, Flex};
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::DType;
use deeplab::{Config, Phase, Point, Precision, Recompute, Trainer};
use std::io::Write;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The variable the vendored cubecl-runtime reads for the pools' layout (`pytorch` or `burn`).
#[cfg(feature = "cuda")]
const MEMORY_MODEL_ENV: &str = "OOM_BISECT_MEMORY_MODEL";

/// Room for the CPU trial's stream, in events (16 bytes each, mapped as they are noted): a
/// quickstart trial notes about 100,000.
const STREAM_ROOM: usize = 1 << 27;

static PANICKED: AtomicBool = AtomicBool::new(false);
/// The first panic's message, for the exit code.
static FIRST_PANIC: Mutex<Option<String>> = Mutex::new(None);

/// Whether the first panic was an allocation refused (the trial's out-of-memory).
fn first_panic_is_oom() -> bool {
    let first = FIRST_PANIC.lock().map(|g| g.clone()).unwrap_or(None);
    matches!(
        first.as_deref().map(classify_message),
        Some(MessageKind::AllocationFailure { .. })
    )
}

fn panic_exit_code() -> i32 {
    match first_panic_is_oom() {
        true => exit::OOM,
        false => exit::INCONCLUSIVE,
    }
}

/// How long the watchdog lets other threads report after the first panic. An allocation refused
/// first is the verdict (the parent takes the first refusal among the panics), so the process
/// ends at once: under the cap a third of a diagnosis's trials end this way, and the 1.5 s they
/// waited held a slot. Any other first panic waits as before: a refusal reported after it still
/// makes the trial an out-of-memory rather than an error.
fn grace_after_panic(oom_first: bool) -> Duration {
    match oom_first {
        true => Duration::from_millis(20),
        false => Duration::from_millis(1500),
    }
}

/// Reports every panic on every thread, and ends the process shortly after one: a panicked device
/// thread can leave the main thread blocked forever or computing garbage.
fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let thread = std::thread::current()
            .name()
            .unwrap_or("unnamed")
            .to_string();
        let payload = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "(non-text panic payload)".into());
        let message = match info.location() {
            Some(l) => format!("{payload} (at {}:{})", l.file(), l.line()),
            None => payload,
        };
        if let Ok(mut first) = FIRST_PANIC.lock() {
            first.get_or_insert_with(|| message.clone());
        }
        emit(&ChildEvent::Panic { thread, message });
        PANICKED.store(true, Ordering::SeqCst);
    }));
    // The watchdog: once anything panicked, give follow-on messages their moment (none after an
    // out-of-memory), then end the process whatever the main thread is doing.
    std::thread::Builder::new()
        .name("oom-bisect-watchdog".into())
        .spawn(|| loop {
            std::thread::sleep(Duration::from_millis(50));
            if PANICKED.load(Ordering::SeqCst) {
                std::thread::sleep(grace_after_panic(first_panic_is_oom()));
                let _ = std::io::stdout().lock().flush();
                // SAFETY: `_exit` ends the process at once without running destructors or atexit
                // handlers, which may wait on the dead device thread.
                unsafe { libc::_exit(panic_exit_code()) };
            }
        })
        .expect("spawn watchdog");
}

/// The write end of the stop thread's pipe; -1 until it runs.
static STOP_PIPE: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);

extern "C" fn on_stop_signal(_: libc::c_int) {
    let fd = STOP_PIPE.load(Ordering::SeqCst);
    // SAFETY: write, alarm and kill are async-signal-safe. The stop thread does the work; should it
    // not finish in 2 s, SIGALRM (below) ends the group anyway.
    unsafe {
        libc::alarm(2);
        if fd < 0 || libc::write(fd, b"x".as_ptr().cast(), 1) != 1 {
            libc::kill(0, libc::SIGKILL);
        }
    }
}

extern "C" fn end_group(_: libc::c_int) {
    // SAFETY: kill is async-signal-safe; group 0 is our own, created for this trial by the parent.
    unsafe { libc::kill(0, libc::SIGKILL) };
}

/// The parent sends SIGTERM to stop a trial, and arranges it for when it dies
/// (`PR_SET_PDEATHSIG`), as SIGINT and SIGHUP may come from a terminal: the trial then takes with
/// it whatever it started, also what left its process group (a `--exec` command's `setsid`
/// children, its cgroup: `exec::on_stop`), then its whole group (helpers, a compiler), so that
/// nothing keeps the card or the CPU. The work is done on a thread woken through a pipe, as a
/// signal handler may not allocate.
fn die_with_parent() {
    let mut fds = [0; 2];
    // SAFETY: pipe fills the two descriptors it is given.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } == 0 {
        let read_end = fds[0];
        let stop = std::thread::Builder::new()
            .name("oom-bisect-stop".into())
            .spawn(move || {
                let mut byte = 0u8;
                loop {
                    // SAFETY: reads one byte into a local from the pipe this thread owns.
                    match unsafe { libc::read(read_end, (&mut byte as *mut u8).cast(), 1) } {
                        1 => break,
                        0 => return,
                        _ => continue, // interrupted
                    }
                }
                crate::exec::on_stop();
                end_group(0);
            });
        if stop.is_ok() {
            STOP_PIPE.store(fds[1], Ordering::SeqCst);
        }
    }
    // SAFETY: installs handlers that only call async-signal-safe functions.
    unsafe {
        for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
            libc::signal(sig, on_stop_signal as *const () as libc::sighandler_t);
        }
        libc::signal(libc::SIGALRM, end_group as *const () as libc::sighandler_t);
    }
}

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

/// How memory is read on each backend.
enum Meter {
    Cpu {
        replay: bool,
    },
    #[cfg(feature = "cuda")]
    Cuda {
        ceiling: crate::cuda::CudaCeiling,
        device: burn_cuda::CudaDevice,
        peak: u64,
        replay: bool,
    },
    /// A virtual card (`Engine::Stream`): the pools' own figures are the device's, as PyTorch's
    /// allocator reserves without a cap, on top of the card's context.
    #[cfg(feature = "cuda")]
    Stream {
        device: burn_cuda::CudaDevice,
        ceiling_bytes: u64,
        context_bytes: u64,
        peak: u64,
    },
}

impl Meter {
    /// (bytes held by live tensors, bytes the device handed out). Call after a device sync.
    fn read(&mut self) -> (u64, u64) {
        match self {
            Meter::Cpu { .. } => {
                let now = crate::alloc::in_use() as u64;
                (now, now)
            }
            #[cfg(feature = "cuda")]
            Meter::Cuda {
                ceiling,
                device,
                peak,
                ..
            } => {
                use cubecl::Runtime;
                let in_use = cubecl::cuda::CudaRuntime::client(device)
                    .memory_usage()
                    .map(|u| u.bytes_in_use)
                    .unwrap_or(0);
                let used = ceiling.device_used();
                *peak = (*peak).max(used);
                (in_use, used)
            }
            #[cfg(feature = "cuda")]
            Meter::Stream {
                device,
                context_bytes,
                peak,
                ..
            } => {
                use cubecl::Runtime;
                let usage = cubecl::cuda::CudaRuntime::client(device).memory_usage();
                let (in_use, reserved) = usage
                    .map(|u| (u.bytes_in_use, u.bytes_reserved))
                    .unwrap_or((0, 0));
                let used = *context_bytes + reserved;
                *peak = (*peak).max(used);
                (in_use, used)
            }
        }
    }

    /// The ceiling the trial runs under, in the unit of [`Meter::peak`].
    fn ceiling(&self) -> u64 {
        match self {
            Meter::Cpu { .. } => crate::alloc::limit() as u64,
            #[cfg(feature = "cuda")]
            Meter::Cuda { ceiling, .. } => ceiling.ceiling_bytes,
            #[cfg(feature = "cuda")]
            Meter::Stream { ceiling_bytes, .. } => *ceiling_bytes,
        }
    }

    /// Whether the device computes nothing (a virtual card): what is read back is zeros.
    fn computes_nothing(&self) -> bool {
        match self {
            #[cfg(feature = "cuda")]
            Meter::Stream { .. } => true,
            _ => false,
        }
    }

    /// Requests and releases noted in the trial's stream so far.
    fn events_noted(&self) -> usize {
        match self {
            Meter::Cpu { .. } => crate::alloc::recorder::len(),
            #[cfg(feature = "cuda")]
            Meter::Cuda { .. } | Meter::Stream { .. } => {
                cubecl_runtime::memory_management::oom_bisect::stream_len()
            }
        }
    }

    /// Whether the trial's stream is replayed through PyTorch's allocator: under the `pytorch`
    /// memory model (burn's own pools are not PyTorch's).
    fn replays(&self) -> bool {
        match self {
            Meter::Cpu { replay, .. } => *replay,
            #[cfg(feature = "cuda")]
            Meter::Cuda { replay, .. } => *replay,
            #[cfg(feature = "cuda")]
            Meter::Stream { .. } => true,
        }
    }

    /// The trial's stream so far: its events, the bytes held before it, the device streams that
    /// made it, and whether the device itself holds the ceiling.
    fn stream(&self) -> Result<(Vec<pytorch_allocator::Event>, u64, u32, bool)> {
        match self {
            Meter::Cpu { .. } => {
                let stream = crate::alloc::recorder::stream()
                    .ok_or_else(|| anyhow!("the trial's stream outgrew the room noted for it"))?;
                // Nothing held before it counts: the process's own heap (about 11 KiB) is no
                // device's context, and it moves by a few bytes with what its threads did
                // meanwhile; the need is the stream's alone, so that it repeats to the byte.
                Ok((stream, 0, 1, false))
            }
            #[cfg(feature = "cuda")]
            Meter::Cuda { ceiling, .. } => {
                let (stream, streams) = cubecl_runtime::memory_management::oom_bisect::stream();
                Ok((stream, ceiling.context_bytes, streams, true))
            }
            // Nothing held the ceiling: the replay is the verdict.
            #[cfg(feature = "cuda")]
            Meter::Stream { context_bytes, .. } => {
                let (stream, streams) = cubecl_runtime::memory_management::oom_bisect::stream();
                Ok((stream, *context_bytes, streams, false))
            }
        }
    }

    /// The trial's stream replayed under its ceiling, or why it cannot be.
    fn replayed(&self) -> Result<crate::protocol::Replayed> {
        let (stream, before, streams, held) = self.stream()?;
        if let Some(path) = std::env::var_os(STREAM_OUT) {
            write_stream(std::path::Path::new(&path), &stream, before)?;
        }
        Ok(crate::replayed::replayed(
            &stream,
            before,
            self.ceiling(),
            held,
            streams,
            pytorch_allocator::AllocConf::default(),
        ))
    }

    /// The most bytes PyTorch's allocator reserved for the stream so far, without a cap, with the
    /// bytes before it: what a step's peak is, as PyTorch would hold it.
    fn reserved_so_far(&self) -> u64 {
        if !self.replays() {
            return 0;
        }
        match self.stream() {
            Ok((stream, before, _, _)) => {
                before + pytorch_allocator::replay(&stream, None).stats.peak_reserved
            }
            Err(_) => u64::MAX,
        }
    }

    /// Most memory handed out: the most PyTorch's allocator reserved for the stream (with the
    /// bytes before it), or, where more, the allocator's own peak on the CPU and on CUDA the highest
    /// device reading (pools do not shrink, so the reading after the last step bounds them).
    fn peak(&mut self) -> u64 {
        // A reading now: on CUDA it raises the highest reading to the present one.
        self.read();
        let measured = match self {
            Meter::Cpu { .. } => crate::alloc::peak() as u64,
            #[cfg(feature = "cuda")]
            Meter::Cuda { peak, .. } | Meter::Stream { peak, .. } => *peak,
        };
        measured.max(self.reserved_so_far())
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
    let device = burn_cuda::CudaDevice::default();
    let mut meter = Meter::Cuda {
        ceiling,
        device: device.clone(),
        peak: 0,
        replay: config.device.memory_model() == deeplab::MemoryModel::Pytorch,
    };
    train_on_cuda(config, &device, &mut meter, req)
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
    // Pure low precision: every float in it. Autocast keeps f32 as the default (the weights) and
    // the model casts where PyTorch's autocast would.
    let dtype = match config.train.precision {
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

/// Names a file to write the trial's stream to, for comparing it with a PyTorch trace
/// (docs/fidelity.md): a diagnostic, not part of the protocol.
const STREAM_OUT: &str = "OOM_BISECT_STREAM_OUT";

/// Writes `stream` as JSON: `{"before": bytes, "events": [["alloc", id, size] | ["free", id], …]}`.
fn write_stream(
    path: &std::path::Path,
    stream: &[pytorch_allocator::Event],
    before: u64,
) -> Result<()> {
    use pytorch_allocator::Event;
    let events: Vec<serde_json::Value> = stream
        .iter()
        .map(|e| match *e {
            Event::Alloc { id, size } => serde_json::json!(["alloc", id, size]),
            Event::Free { id } => serde_json::json!(["free", id]),
        })
        .collect();
    let text = serde_json::json!({ "before": before, "events": events }).to_string();
    // Never through a final link: one planted there would have the trial replace another file.
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .map_err(|e| anyhow!("{STREAM_OUT}: cannot write {}: {e}", path.display()))
}

/// A stream a trial wrote under `OOM_BISECT_STREAM_OUT`: the bytes held before it, and its events.
pub fn read_stream(path: &std::path::Path) -> Result<(u64, Vec<pytorch_allocator::Event>)> {
    use pytorch_allocator::Event;
    #[derive(serde::Deserialize)]
    #[serde(untagged)]
    enum Line {
        Alloc(String, u64, u64),
        Free(String, u64),
    }
    #[derive(serde::Deserialize)]
    struct File {
        before: u64,
        events: Vec<Line>,
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow!("cannot read the stream {}: {e}", path.display()))?;
    let file: File = serde_json::from_str(&text)
        .map_err(|e| anyhow!("{} is not a stream {STREAM_OUT} wrote: {e}", path.display()))?;
    let events = file.events.into_iter().map(|l| match l {
        Line::Alloc(a, id, size) if a == "alloc" => Ok(Event::Alloc { id, size }),
        Line::Free(a, id) if a == "free" => Ok(Event::Free { id }),
        _ => Err(anyhow!(
            "{}: an event is neither alloc nor free",
            path.display()
        )),
    });
    Ok((file.before, events.collect::<Result<_>>()?))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_stream_reads_back_in_order() {
        use pytorch_allocator::Event;
        let path =
            std::env::temp_dir().join(format!("oom-bisect-stream-{}.json", std::process::id()));
        let stream = [
            Event::Alloc { id: 7, size: 512 },
            Event::Alloc { id: 8, size: 2048 },
            Event::Free { id: 7 },
        ];
        write_stream(&path, &stream, 100).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let read = read_stream(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(read, (100, stream.to_vec()));
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"before": 100, "events": [["alloc", 7, 512], ["alloc", 8, 2048], ["free", 7]]})
        );
    }

    #[test]
    fn an_out_of_memory_ends_the_trial_without_waiting_for_follow_ons() {
        assert!(grace_after_panic(true) <= Duration::from_millis(50));
        // Any other first panic still waits for an allocation refused after it.
        assert!(grace_after_panic(false) >= Duration::from_secs(1));
    }
}
