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

fn bytes_after(message: &str, marker: &str) -> Option<u64> {
    let i = message.find(marker)? + marker.len();
    let digits: String = message[i..]
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    digits.parse().ok()
}

pub fn classify_message(message: &str) -> MessageKind {
    // burn-cuda 0.21 / cubecl 0.10, on the device-runner thread.
    if message.contains("can't allocate buffer of size") {
        return MessageKind::AllocationFailure {
            bytes: bytes_after(message, "can't allocate buffer of size:"),
        };
    }
    // The CPU ceiling (our allocator) and Rust's own report of the refusal that follows it.
    if message.contains(CPU_REFUSAL) {
        return MessageKind::AllocationFailure {
            bytes: bytes_after(message, CPU_REFUSAL),
        };
    }
    if message.contains("memory allocation of") && message.contains("failed") {
        return MessageKind::AllocationFailure {
            bytes: bytes_after(message, "memory allocation of"),
        };
    }
    // The driver's own code, when it surfaces through another path.
    if message.contains("CUDA_ERROR_OUT_OF_MEMORY") || message.contains("out of memory") {
        return MessageKind::AllocationFailure { bytes: None };
    }
    if message.contains("Memory page") && message.contains("doesn't exist") {
        return MessageKind::FollowOn;
    }
    MessageKind::Other
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
            assert_eq!(classify_message(msg), want, "{msg}");
            n += 1;
        }
        assert!(n >= 8);
    }
}
