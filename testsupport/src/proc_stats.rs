//! A process's memory and CPU from `/proc`, for the measurements that print figures beside
//! each other (the scale benches): one reading of the kernel's fields for all of them.

/// `VmRSS` and `VmHWM` (MiB) from the text of `/proc/<pid>/status`.
pub fn parse_memory_mib(status: &str) -> Option<(f64, f64)> {
    let field = |name: &str| -> Option<f64> {
        let line = status.lines().find(|l| l.starts_with(name))?;
        let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kb / 1024.0)
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

/// User + system CPU seconds of the process, and of its reaped children, from the text of
/// `/proc/<pid>/stat` (clock ticks of 1/100 s).
pub fn parse_cpu_seconds(stat: &str) -> Option<(f64, f64)> {
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<f64> = rest
        .split_whitespace()
        .take(15)
        .map(|x| x.parse().unwrap_or(0.0))
        .collect();
    // utime, stime, cutime, cstime.
    Some(((f.get(11)? + f.get(12)?) / 100.0, (f.get(13)? + f.get(14)?) / 100.0))
}

/// `VmRSS` and `VmHWM` of a process (`pid`, or `self`), in MiB; None when it is gone.
pub fn memory_mib(pid: &str) -> Option<(f64, f64)> {
    parse_memory_mib(&std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?)
}

/// CPU seconds of a process (`pid`, or `self`) so far, its own and its reaped children's.
pub fn cpu_seconds(pid: &str) -> Option<(f64, f64)> {
    parse_cpu_seconds(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_is_read_from_vmrss_and_vmhwm_in_mib() {
        let status = "Name:\tx\nVmHWM:\t  20480 kB\nVmRSS:\t  10240 kB\n";
        assert_eq!(parse_memory_mib(status), Some((10.0, 20.0)));
        assert_eq!(parse_memory_mib("Name:\tx\n"), None);
    }

    #[test]
    fn cpu_is_user_plus_system_ticks_after_a_command_name_with_spaces() {
        // pid (comm) state, then fields 4..: utime is the 14th field, stime 15th, cutime 16th, cstime 17th.
        let stat = "42 (a b) S 1 2 3 4 5 6 7 8 9 10 150 50 300 100 20 0";
        assert_eq!(parse_cpu_seconds(stat), Some((2.0, 4.0)));
        assert_eq!(parse_cpu_seconds("42 (x) S 1"), None);
        assert!(memory_mib("self").is_some() && cpu_seconds("self").is_some());
    }
}
