//! The convolution workspaces PyTorch would ask for, asked of the cuDNN on this machine as PyTorch
//! asks it (`aten/src/ATen/native/cudnn/Conv_v8.cpp`, `cudnn.benchmark` off): for each convolution
//! an operation graph of that one convolution (NCHW tensors, 32-byte aligned as the caching
//! allocator's blocks are, ids `x`, `y`, `w`), then the engine configs of the instant heuristics,
//! then those of the fallback list, each list without the configs PyTorch filters out (those that
//! down-convert their inputs), each config built into an execution plan (a config cuDNN refuses to
//! build is skipped, as PyTorch skips it) whose workspace size is what PyTorch's caching allocator
//! is asked for before the convolution runs.
//!
//! The library is the one named by `OOM_BISECT_CUDNN` (a file or the directory holding it; `none`
//! asks nothing), else the one PyTorch's wheel installs (`nvidia.cudnn`, found through `python3`:
//! what the user's PyTorch runs), else the dynamic loader's. Its functions are bound from that
//! library alone. Without one, a trial's stream holds no workspaces and the report says so.

mod library;
mod plan;

use plan::{open, Cudnn};
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

pub use cubecl_runtime::memory_management::oom_bisect::Conv;

pub use library::CUDNN_ENV;

/// What this process knows: the answers so far (read from the shared file first), where to add
/// new ones, and the handle, opened at the first convolution no one has asked about yet.
struct State {
    answers: HashMap<Conv, Vec<u64>>,
    /// The convolutions this process met, in order.
    met: Vec<Conv>,
    file: Option<std::path::PathBuf>,
    cudnn: Option<Result<Cudnn, String>>,
    /// The library's version, or why none could be loaded.
    library: Result<usize, String>,
}

static STATE: OnceLock<Mutex<State>> = OnceLock::new();

fn state() -> std::sync::MutexGuard<'static, State> {
    STATE
        .get_or_init(|| Mutex::new(State::load()))
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// The cuDNN this process asks, as `cuDNN 9.14.0`, or why there is none.
pub fn available() -> Result<String, String> {
    let v = state().library.clone()?;
    Ok(format!(
        "cuDNN {}.{}.{}",
        v / 10000,
        (v % 10000) / 100,
        v % 100
    ))
}

/// The workspace of each engine PyTorch would try for `conv`, in its order, up to the first that
/// needs none (it always runs: no engine after it is ever tried); empty where cuDNN cannot be
/// asked. Asked once per convolution, card and cuDNN: answers are kept in the kernel cache
/// (`OOM_BISECT_KERNEL_CACHE`), so that later trials need neither the GPU nor cuDNN's time.
pub fn workspaces(conv: &Conv) -> Vec<u64> {
    let mut st = state();
    if !st.met.contains(conv) {
        st.met.push(*conv);
    }
    if let Some(known) = st.answers.get(conv) {
        return known.clone();
    }
    let sizes = st.ask(conv);
    st.remember(conv, &sizes);
    sizes
}

/// Every convolution this process met, in order, with its answer (for `OOM_BISECT_CUDNN_OUT`).
pub fn asked() -> Vec<(Conv, Vec<u64>)> {
    let st = state();
    st.met
        .iter()
        .map(|c| (*c, st.answers.get(c).cloned().unwrap_or_default()))
        .collect()
}

impl State {
    fn load() -> State {
        let library = library::load();
        let file = library.as_ref().ok().and_then(|&v| answers_file(v));
        let answers = file.as_deref().map(read_answers).unwrap_or_default();
        State {
            answers,
            met: Vec::new(),
            file,
            cudnn: None,
            library,
        }
    }

    fn ask(&mut self, conv: &Conv) -> Vec<u64> {
        let Ok(&version) = self.library.as_ref() else {
            return Vec::new();
        };
        let cudnn = self.cudnn.get_or_insert_with(|| open(version));
        match cudnn {
            Ok(s) => s.engines(conv).unwrap_or_default(),
            Err(_) => Vec::new(),
        }
    }

    /// Keeps `sizes` for `conv`, in this process and (where asked of cuDNN) in the shared file:
    /// one line, appended in one write, so that trials writing at once do not interleave.
    fn remember(&mut self, conv: &Conv, sizes: &[u64]) {
        self.answers.insert(*conv, sizes.to_vec());
        if sizes.is_empty() {
            return;
        }
        if let Some(path) = &self.file {
            use std::io::Write;
            let line = format!("{}\n", answer_line(conv, sizes));
            let _ = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .and_then(|mut f| f.write_all(line.as_bytes()));
        }
    }
}

/// The shared file of answers for this card and cuDNN `version`, in the kernel cache; none
/// without a kernel cache or a card.
fn answers_file(version: usize) -> Option<std::path::PathBuf> {
    let dir = std::env::var_os(crate::cache::KERNEL_CACHE_ENV).filter(|d| !d.is_empty())?;
    cudarc::driver::result::init().ok()?;
    let dev = cudarc::driver::result::device::get(0).ok()?;
    let name = cudarc::driver::result::device::get_name(dev).ok()?;
    let name: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let dir = std::path::Path::new(&dir).join("cudnn");
    std::fs::create_dir_all(&dir).ok()?;
    Some(dir.join(format!("{name}-{version}.txt")))
}

/// One answer as a line: the convolution's numbers, `:`, the workspace sizes, `.` (a line
/// without it was cut short).
fn answer_line(c: &Conv, sizes: &[u64]) -> String {
    let mut words: Vec<String> = vec![c.pass.to_string()];
    words.extend(c.x.iter().chain(&c.w).chain(&c.y).map(|v| v.to_string()));
    words.extend(
        c.stride
            .iter()
            .chain(&c.padding)
            .chain(&c.dilation)
            .map(|v| v.to_string()),
    );
    words.extend([
        c.groups.to_string(),
        c.dtype_bytes.to_string(),
        u8::from(c.bf16).to_string(),
        ":".into(),
    ]);
    words.extend(sizes.iter().map(|s| s.to_string()));
    words.push(".".into());
    words.join(" ")
}

/// A line of [`answer_line`], or `None` for one that is not (a line cut short by a crash).
fn parse_answer(line: &str) -> Option<(Conv, Vec<u64>)> {
    let (key, sizes) = line.strip_suffix(" .")?.split_once(" : ")?;
    let n: Vec<usize> = key
        .split(' ')
        .map(|w| w.parse().ok())
        .collect::<Option<_>>()?;
    let sizes: Vec<u64> = sizes
        .split(' ')
        .map(|w| w.parse().ok())
        .collect::<Option<_>>()?;
    let four = |i: usize| -> [usize; 4] { [n[i], n[i + 1], n[i + 2], n[i + 3]] };
    let two = |i: usize| -> [usize; 2] { [n[i], n[i + 1]] };
    (n.len() == 22 && !sizes.is_empty()).then(|| {
        let conv = Conv {
            pass: n[0] as u8,
            x: four(1),
            w: four(5),
            y: four(9),
            stride: two(13),
            padding: two(15),
            dilation: two(17),
            groups: n[19],
            dtype_bytes: n[20] as u8,
            bf16: n[21] == 1,
        };
        (conv, sizes)
    })
}

fn read_answers(path: &std::path::Path) -> HashMap<Conv, Vec<u64>> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(parse_answer)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{answer_line, parse_answer, Conv};

    #[test]
    fn an_answer_reads_back_from_its_line() {
        let conv = Conv {
            pass: 2,
            x: [8, 64, 128, 128],
            w: [64, 64, 3, 3],
            y: [8, 64, 128, 128],
            stride: [1, 1],
            padding: [1, 1],
            dilation: [1, 1],
            groups: 1,
            dtype_bytes: 2,
            bf16: true,
        };
        let line = answer_line(&conv, &[67_174_400, 0]);
        assert_eq!(parse_answer(&line), Some((conv, vec![67_174_400, 0])));
        assert_eq!(
            parse_answer(&line[..line.len() - 4]),
            None,
            "a line cut short"
        );
        assert_eq!(parse_answer("2 8 64 :"), None);
    }
}
