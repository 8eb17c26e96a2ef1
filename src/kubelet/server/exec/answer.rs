//! What `kubectl exec` (and `/run`) get from a simulated container: decided by the pod
//! lifecycle's `exec` knob, never by running anything. Pure.

use crate::api::kubelet::{Exec, ExecMode};

/// The answer to one command.
#[derive(Clone, Debug, PartialEq)]
pub struct Answer {
    pub stdout: String,
    pub stderr: String,
    pub exit_code: i32,
}

/// The answer to `command` in `container` of `pod` under `settings` (the default: echo).
pub fn answer(settings: Option<&Exec>, command: &[String], pod: &str, container: &str) -> Answer {
    let s = settings.cloned().unwrap_or_default();
    match s.mode {
        ExecMode::Echo => Answer { stdout: format!("{}\n", command.join(" ")), stderr: String::new(), exit_code: 0 },
        ExecMode::Reply => Answer {
            stdout: s.output.clone().unwrap_or_default(),
            stderr: String::new(),
            exit_code: s.exit_code.unwrap_or(0).clamp(0, 255),
        },
        ExecMode::Refuse => Answer {
            stdout: String::new(),
            stderr: format!(
                "kwok-pools: container {container} of pod {pod} is simulated and runs no commands \
                 (spec.lifecycle.pods.exec.mode is Refuse; set it to Echo or Reply to answer)\n"
            ),
            exit_code: s.exit_code.filter(|c| *c != 0).unwrap_or(126).clamp(1, 255),
        },
    }
}

/// The command of an exec request: its repeated `command` query parameters.
pub fn command(query: &[(String, String)]) -> Vec<String> {
    query.iter().filter(|(k, _)| k == "command").map(|(_, v)| v.clone()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(w: &[&str]) -> Vec<String> {
        w.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn echo_reply_and_refuse() {
        let a = answer(None, &words(&["ls", "-l", "/"]), "p", "c");
        assert_eq!((a.stdout.as_str(), a.exit_code), ("ls -l /\n", 0));
        let reply = Exec { mode: ExecMode::Reply, output: Some("ok\n".into()), exit_code: Some(3) };
        let a = answer(Some(&reply), &words(&["anything"]), "p", "c");
        assert_eq!((a.stdout.as_str(), a.exit_code), ("ok\n", 3));
        let refuse = Exec { mode: ExecMode::Refuse, ..Default::default() };
        let a = answer(Some(&refuse), &words(&["sh"]), "web-0", "app");
        assert_eq!(a.exit_code, 126);
        assert!(a.stderr.contains("spec.lifecycle.pods.exec.mode") && a.stderr.contains("web-0"), "{}", a.stderr);
    }

    #[test]
    fn the_command_is_every_command_parameter_in_order() {
        let q = vec![
            ("command".to_string(), "echo".to_string()),
            ("stdout".to_string(), "1".to_string()),
            ("command".to_string(), "a b".to_string()),
        ];
        assert_eq!(command(&q), words(&["echo", "a b"]));
    }
}
