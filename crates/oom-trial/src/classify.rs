//! Which failures are out-of-memory. Only an allocation failure is; a follow-on error of an earlier
//! failure, or anything else, is not. The texts are the devices' own (fixtures in `tests/fixtures`).

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
        u if crate::parse_size(&format!("1{u}")).is_ok() => u,
        _ => "",
    };
    crate::parse_size(&format!("{num}{unit}")).ok()
}

/// The out-of-memory messages of the frameworks a `--exec` command may use, and of our own trials;
/// the failed request's size when the message gives it. Texts in `tests/fixtures/messages.tsv`.
fn allocation_failure(m: &str) -> Option<Option<u64>> {
    let lower = m.to_ascii_lowercase();
    // burn-cuda 0.21 / cubecl 0.10, on the device-runner thread.
    if m.contains("can't allocate buffer of size") {
        return Some(size_after(m, "can't allocate buffer of size:"));
    }
    // The CPU ceiling (our allocator) and Rust's own report of the refusal that follows it.
    if m.contains(CPU_REFUSAL) {
        return Some(size_after(m, CPU_REFUSAL));
    }
    if m.contains("memory allocation of") && m.contains("failed") {
        return Some(size_after(m, "memory allocation of"));
    }
    // PyTorch: `torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.` (HIP on
    // ROCm), and its CPU allocator's `not enough memory: you tried to allocate N bytes`.
    if m.contains("OutOfMemoryError")
        || m.contains("CUDA out of memory")
        || m.contains("HIP out of memory")
    {
        return Some(size_after(m, "Tried to allocate"));
    }
    if m.contains("DefaultCPUAllocator: not enough memory") {
        return Some(size_after(m, "you tried to allocate"));
    }
    // JAX/XLA: `RESOURCE_EXHAUSTED: Out of memory while trying to allocate N bytes`, or
    // `Failed to allocate request for 16.00GiB`. Other exhausted resources are not memory.
    if m.contains("RESOURCE_EXHAUSTED")
        && (lower.contains("out of memory") || lower.contains("failed to allocate"))
    {
        return Some(size_after(m, "allocate").or_else(|| size_after(m, "request for")));
    }
    // TensorFlow: `ResourceExhaustedError: OOM when allocating tensor with shape[…]`.
    if m.contains("OOM when allocating") {
        return Some(None);
    }
    // The driver's and the CUDA libraries' own codes, however they surface.
    let codes = [
        "CUDA_ERROR_OUT_OF_MEMORY",
        "CUDA error: out of memory",
        "cudaErrorMemoryAllocation",
        "CUBLAS_STATUS_ALLOC_FAILED",
        "CUDNN_STATUS_ALLOC_FAILED",
    ];
    if codes.iter().any(|c| m.contains(c)) {
        return Some(None);
    }
    // C++'s `std::bad_alloc` (`what():  std::bad_alloc`), as an uncaught exception prints it.
    if m.contains("std::bad_alloc") {
        return Some(None);
    }
    // Python's own: the last line of a traceback, `MemoryError` (with or without a message).
    let t = m.trim();
    if t == "MemoryError" || t.starts_with("MemoryError:") {
        return Some(None);
    }
    None
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
/// [`is_failure_line`]; a Rust panic's or C++'s message is the line after the header), skipping a
/// wrapper that only reports a failure printed before it; else its last non-empty line. Only this
/// message says whether the command ran out of memory: an out-of-memory it logged, recovered from
/// or printed in a config dump before failing otherwise is not its failure.
pub fn failure_message(output: &str) -> Option<String> {
    let lines: Vec<&str> = output.lines().filter(|l| !l.trim().is_empty()).collect();
    let failures: Vec<usize> = (0..lines.len())
        .filter(|&i| is_failure_line(lines[i]))
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
        _ => Some(header.to_string()),
    }
}

/// How a failed command's output classifies: by its failure message alone.
pub fn classify_output(output: &str) -> (Option<String>, MessageKind) {
    let message = failure_message(output);
    let kind = message
        .as_deref()
        .map(classify_message)
        .unwrap_or(MessageKind::Other);
    (message, kind)
}

/// What was in use when an allocation failed, where the message says: PyTorch's `this process has
/// 78.12 GiB memory in use`, our CPU ceiling's `(in use N`.
pub fn in_use_at_failure(message: &str) -> Option<u64> {
    size_after(message, "this process has").or_else(|| size_after(message, "(in use"))
}

#[cfg(test)]
mod tests {
    use super::*;

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
