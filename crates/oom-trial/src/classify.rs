//! Which failures are out-of-memory. Only an allocation failure is; a follow-on error of an earlier
//! failure, or anything else, is not. The texts are the devices' own (fixtures in `tests/fixtures`).

use crate::protocol::Stage;
use deeplab::Phase;

/// What a panic or stderr line says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MessageKind {
    /// An allocation was refused; the size when the message gives it.
    AllocationFailure {
        bytes: Option<u64>,
    },
    /// An error that follows an allocation failure on burn-cuda (a freed or never-made page), which is
    /// not an OOM by itself.
    FollowOn,
    Other,
}

/// The line the CPU ceiling's allocator writes to stderr when it refuses an allocation.
pub const CPU_REFUSAL: &str = "oom-bisect: allocator refused";

/// A size written after `marker`, as the messages print them: `2.00 GiB`, `20.00 MiB`,
/// `1024 bytes`, plain digits (`buffer of size: 42949672960`).
fn size_after(message: &str, marker: &str) -> Option<u64> {
    let i = message.find(marker)? + marker.len();
    let rest = message[i..].trim_start();
    let num_end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let (num, tail) = rest.split_at(num_end);
    let unit: String = tail
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_alphabetic())
        .collect();
    let unit = match unit.as_str() {
        "bytes" | "byte" => "",
        u if crate::units::parse_size(&format!("1{u}")).is_ok() => u,
        _ => "",
    };
    crate::units::parse_size(&format!("{num}{unit}")).ok()
}

/// Exception types that are an out-of-memory whatever their message: PyTorch's
/// (`torch.OutOfMemoryError`, `torch.cuda.OutOfMemoryError`), Python's `MemoryError`.
fn oom_type(name: &str) -> bool {
    name.ends_with("OutOfMemoryError") || name == "MemoryError"
}

/// Exception types that carry a runtime's failure, an out-of-memory among others: their message
/// says which. Any other type (`AssertionError`, `ValueError`, a logger's `health:`) is not an
/// out-of-memory, whatever its message mentions.
const CARRIERS: [&str; 8] = [
    "ncclUnhandledCudaError",
    "RuntimeError",
    "Error",
    "XlaRuntimeError",
    "JaxRuntimeError",
    "ResourceExhaustedError",
    "InternalError",
    "DistBackendError",
];

/// How the frameworks' out-of-memory messages begin (after the exception type).
const OOM_STARTS: [&str; 8] = [
    "CUDA out of memory",
    "HIP out of memory",
    "CUDA error: out of memory",
    "CUDA error: CUBLAS_STATUS_ALLOC_FAILED",
    "cuDNN error: CUDNN_STATUS_ALLOC_FAILED",
    "RESOURCE_EXHAUSTED: Out of memory",
    "RESOURCE_EXHAUSTED: Failed to allocate",
    "OOM when allocating",
];

/// Codes and texts that are an allocation failure wherever they stand in a runtime's message:
/// our own trials' (burn-cuda's device thread, the CPU ceiling, Rust's abort), the CUDA driver's
/// and libraries' codes, C++'s `std::bad_alloc`, PyTorch's CPU allocator, NCCL's.
const OOM_CODES: [&str; 10] = [
    "can't allocate buffer of size",
    CPU_REFUSAL,
    "CUDA_ERROR_OUT_OF_MEMORY",
    "cudaErrorMemoryAllocation",
    "CUBLAS_STATUS_ALLOC_FAILED",
    "CUDNN_STATUS_ALLOC_FAILED",
    "std::bad_alloc",
    "DefaultCPUAllocator: not enough memory",
    "Cuda failure 'out of memory'",
    "Cuda failure 2 'out of memory'",
];

/// A failure line's exception type (the last segment of a dotted name before `: `, or the line
/// when it is a bare name) and its message.
fn exception(m: &str) -> (Option<&str>, &str) {
    let mut t = m.trim();
    // Java's `Exception in thread "main" java.lang.OutOfMemoryError: Java heap space`.
    if let Some(rest) = t.strip_prefix("Exception in thread \"") {
        t = rest.split_once("\" ").map_or(rest, |(_, after)| after);
    }
    let (head, rest) = match t.split_once(": ") {
        Some((h, r)) => (h, r),
        None => (t.strip_suffix(':').unwrap_or(t), ""),
    };
    let identifier = !head.is_empty()
        && head
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.');
    match identifier {
        true => (Some(head.rsplit('.').next().unwrap_or(head)), rest),
        false => (None, t),
    }
}

/// The out-of-memory messages of the frameworks a `--exec` command may use, and of our own trials;
/// the failed request's size when the message gives it. Decided by the exception type first (a
/// test's `AssertionError` that mentions an out-of-memory is not one), then by how the message
/// begins or a code it carries. Texts in `tests/fixtures/messages.tsv`.
fn allocation_failure(m: &str) -> Option<Option<u64>> {
    let size = || {
        size_after(m, "Tried to allocate")
            .or_else(|| size_after(m, "can't allocate buffer of size:"))
            .or_else(|| size_after(m, CPU_REFUSAL))
            .or_else(|| size_after(m, "memory allocation of"))
            .or_else(|| size_after(m, "you tried to allocate"))
            .or_else(|| size_after(m, "trying to allocate"))
            .or_else(|| size_after(m, "request for"))
    };
    let (ty, message) = exception(m);
    match ty {
        Some(t) if oom_type(t) => return Some(size()),
        Some(t) if !CARRIERS.contains(&t) => return None,
        _ => {}
    }
    let starts = OOM_STARTS.iter().any(|s| message.starts_with(s));
    let code = OOM_CODES.iter().any(|c| m.contains(c))
        || (m.contains("memory allocation of") && m.contains("bytes failed"));
    (starts || code).then(size)
}

pub fn classify_message(message: &str) -> MessageKind {
    if let Some(bytes) = allocation_failure(message) {
        return MessageKind::AllocationFailure { bytes };
    }
    if message.contains("Memory page") && message.contains("doesn't exist") {
        return MessageKind::FollowOn;
    }
    MessageKind::Other
}

/// Exceptions that only wrap a failure printed before them (a launcher's report of its worker,
/// a subprocess's exit): the failure is the one before.
const WRAPPERS: [&str; 3] = [
    "ChildFailedError",
    "CalledProcessError",
    "ProcessExitedException",
];

/// Whether a line states a failure, as runtimes print their last words: a Python (or other
/// dotted) exception type with its message, `Exception in thread …` (Java), a Rust panic header,
/// `error:`/`fatal:`, C++'s `terminate called …`. Log lines that merely mention a failure do not.
fn is_failure_line(line: &str) -> bool {
    if line.starts_with(char::is_whitespace) {
        return false;
    }
    if line.starts_with("Exception in thread ")
        || line.starts_with("terminate called ")
        || (line.starts_with("thread '") && line.contains("' panicked at"))
    {
        return true;
    }
    let head = line.split(':').next().unwrap_or("");
    if head.is_empty()
        || !head
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
    {
        return false;
    }
    let name = head.rsplit('.').next().unwrap_or(head);
    let generic = ["error", "fatal", "panic"].contains(&name.to_ascii_lowercase().as_str());
    let typed = [
        "Error",
        "Exception",
        "Exit",
        "Interrupt",
        "Failure",
        "Fault",
    ]
    .iter()
    .any(|s| name.ends_with(s));
    // `Error: …` alone (anyhow's report) or a type name; a bare word is a type only with a colon
    // or on a line of its own (`MemoryError`).
    generic || typed
}

/// The failure message of a failed command's output: its last failure line (see
/// `is_failure_line`; a Rust panic's or C++'s message is the line after the header), skipping a
/// wrapper that only reports a failure printed before it; else its last non-empty line. Only this
/// message says whether the command ran out of memory: an out-of-memory it logged, recovered from
/// or printed in a config dump before failing otherwise is not its failure.
pub fn failure_message(output: &str) -> Option<String> {
    let lines: Vec<&str> = output.lines().filter(|l| !l.trim().is_empty()).collect();
    let ignored = ignored_blocks(&lines);
    let failures: Vec<usize> = (0..lines.len())
        .filter(|&i| !ignored[i] && is_failure_line(lines[i]))
        .collect();
    let last = failures
        .iter()
        .rev()
        .find(|&&i| !WRAPPERS.iter().any(|w| lines[i].contains(w)))
        .or(failures.last())
        .copied();
    let Some(i) = last else {
        return lines.last().map(|l| l.to_string());
    };
    let header = lines[i].trim_end();
    let continued = (header.contains("' panicked at") && header.ends_with(':'))
        || header.starts_with("terminate called ");
    match (continued, lines.get(i + 1)) {
        (true, Some(next)) => Some(format!("{header} {}", next.trim())),
        // What the last failure says on the lines after it (NCCL's `Last error:` with the CUDA
        // error), up to two, where they are not a failure of their own or an ignored report.
        _ => {
            let after = lines[i + 1..]
                .iter()
                .enumerate()
                .take_while(|(k, l)| !ignored[i + 1 + k] && !is_failure_line(l))
                .take(2)
                .map(|(_, l)| l.trim());
            Some(
                std::iter::once(header)
                    .chain(after)
                    .collect::<Vec<_>>()
                    .join(" "),
            )
        }
    }
}

/// Lines of Python's `Exception ignored in: …` reports (an exception in a destructor or at exit,
/// printed after the failure that ended the program): the header, its traceback and its
/// exception's line. None of them is the command's failure.
fn ignored_blocks(lines: &[&str]) -> Vec<bool> {
    let mut ignored = vec![false; lines.len()];
    let mut inside = false;
    for (i, l) in lines.iter().enumerate() {
        if l.starts_with("Exception ignored in") {
            inside = true;
        }
        if inside {
            ignored[i] = true;
            // The block ends with its exception's line: not indented, not the traceback's header.
            let last = !l.starts_with(char::is_whitespace)
                && !l.starts_with("Exception ignored in")
                && !l.starts_with("Traceback ");
            inside = !last;
        }
    }
    ignored
}

/// How a failed command's output classifies: by its failure message alone.
/// The failure a command's output tells, read stream by stream: its stderr's last failure line
/// (where tracebacks, panics and `terminate` go), else its stdout's, else the last line of either.
/// A program's stdout reaches us when its buffer is flushed, often at exit and after a traceback
/// printed later: what it logged there (a caught out-of-memory) never takes the failure's place.
pub fn failure_by_stream(stdout: &str, stderr: &str) -> Option<String> {
    let fails = |text: &str| {
        let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        let ignored = ignored_blocks(&lines);
        (0..lines.len()).any(|i| !ignored[i] && is_failure_line(lines[i]))
    };
    match (fails(stderr), fails(stdout)) {
        (true, _) => failure_message(stderr),
        (false, true) => failure_message(stdout),
        (false, false) => failure_message(stderr).or_else(|| failure_message(stdout)),
    }
}

pub fn classify_output(output: &str) -> (Option<String>, MessageKind) {
    let message = failure_message(output);
    let kind = message
        .as_deref()
        .map(classify_message)
        .unwrap_or(MessageKind::Other);
    (message, kind)
}

/// Where a Python traceback in `output` places the failure, for a command that reported no stages:
/// the last frame of its own code (not a library's) that reads as backward, the optimizer's step or,
/// else, the forward pass; the stage is named by the line itself (`train.py:42 loss.backward()`).
pub fn traceback_place(output: &str) -> Option<(Phase, Stage)> {
    let lines: Vec<&str> = output.lines().collect();
    let start = lines.iter().rposition(|l| l.starts_with("Traceback ("))?;
    let library = ["site-packages", "dist-packages", "/lib/python", "<frozen"];
    let (file, line, code) = (start..lines.len())
        .rev()
        .filter_map(|i| {
            let frame = lines[i].trim_start().strip_prefix("File \"")?;
            let (file, rest) = frame.split_once("\", line ")?;
            let number = rest.split(',').next()?;
            let code = lines.get(i + 1)?.trim();
            Some((file, number, code))
        })
        .find(|(file, _, _)| !library.iter().any(|l| file.contains(l)))?;
    let name = file.rsplit('/').next().unwrap_or(file);
    let phase = if code.contains("backward(") {
        Phase::Backward
    } else if code.contains(".step(") {
        Phase::Step
    } else {
        Phase::Forward
    };
    Some((phase, Stage::Module(format!("{name}:{line} {code}"))))
}

/// What was in use when an allocation failed, where the message says: PyTorch's `this process has
/// 78.12 GiB memory in use`, our CPU ceiling's `(in use N`.
pub fn in_use_at_failure(message: &str) -> Option<u64> {
    size_after(message, "this process has").or_else(|| size_after(message, "(in use"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A command that reports no stage is placed by its own last frame: `loss.backward()` in the
    /// user's script, not torch's frames below it; no traceback, no place.
    #[test]
    fn a_traceback_places_the_failure_in_the_users_code() {
        let tb =
            "step 1\nTraceback (most recent call last):\n  File \"/home/u/train.py\", line 42, \
                  in <module>\n    loss.backward()\n  File \"/usr/lib/python3/site-packages/torch/\
                  _tensor.py\", line 521, in backward\n    torch.autograd.backward(\n\
                  torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB";
        let (phase, stage) = traceback_place(tb).unwrap();
        assert_eq!(phase, Phase::Backward);
        assert_eq!(stage.name(), "train.py:42 loss.backward()");
        let step = tb.replace("loss.backward()", "optimizer.step()");
        assert_eq!(traceback_place(&step).unwrap().0, Phase::Step);
        let fwd = tb.replace("loss.backward()", "out = model(x)");
        assert_eq!(traceback_place(&fwd).unwrap().0, Phase::Forward);
        assert_eq!(traceback_place("CUDA out of memory"), None);
    }

    /// Each fixture line: `kind<TAB>bytes-or-dash<TAB>message`.
    #[test]
    fn real_messages() {
        let text = include_str!("../tests/fixtures/messages.tsv");
        let mut n = 0;
        for line in text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        {
            let mut parts = line.splitn(3, '\t');
            let (kind, bytes, msg) = (
                parts.next().unwrap(),
                parts.next().unwrap(),
                parts.next().unwrap(),
            );
            let bytes = (bytes != "-").then(|| bytes.parse::<u64>().unwrap());
            let want = match kind {
                "oom" => MessageKind::AllocationFailure { bytes },
                "follow-on" => MessageKind::FollowOn,
                "other" => MessageKind::Other,
                k => panic!("bad fixture kind {k}"),
            };
            // `\n` in a fixture separates the lines of a command's output: only its failure
            // message counts. A single line is its own failure message.
            let output = msg.replace("\\n", "\n");
            if !output.contains('\n') {
                assert_eq!(classify_message(msg), want, "{msg}");
            }
            assert_eq!(classify_output(&output).1, want, "output: {output}");
            n += 1;
        }
        assert!(n >= 25, "{n} fixtures");
    }

    #[test]
    fn in_use_at_a_failure() {
        let torch =
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 \
            has a total capacity of 79.19 GiB of which 1.06 GiB is free. Including non-PyTorch \
            memory, this process has 78.12 GiB memory in use.";
        assert_eq!(
            in_use_at_failure(torch),
            Some((78.12 * (1u64 << 30) as f64) as u64)
        );
        let cpu = "oom-bisect: allocator refused 268435456 bytes (in use 1073741000, ceiling 1)";
        assert_eq!(in_use_at_failure(cpu), Some(1073741000));
        assert_eq!(in_use_at_failure("CUDA out of memory."), None);
    }
}
