//! What `kubectl exec` (and `/run`) get from a simulated container: decided by the pod
//! lifecycle's `exec` knob, never by running anything. Pure.

use super::shell::{self, Container, Invocation};
use crate::api::kubelet::{Exec, ExecMode};
use std::time::Duration;

/// What a session does with the client's stdin after the answer.
#[derive(Clone, Debug, PartialEq)]
pub enum Stdin {
    /// Nothing: the session ends.
    Ignored,
    /// Copied to stdout until it ends (`Echo`, or the shell's `cat`).
    Echoed,
    /// Each line run by the shell, until `exit` or the end of input (an interactive `sh`).
    Shell(Box<Container>),
}

/// The answer to one command.
#[derive(Clone, Debug, PartialEq)]
pub struct Answer {
    pub stdout: String,
    pub stderr: String,
    pub exit_code: i32,
    /// How long the command lasts before it ends (the shell's `sleep`).
    pub lasts: Duration,
    pub stdin: Stdin,
}

impl Answer {
    fn printed(stdout: String, stderr: String, exit_code: i32) -> Self {
        Answer { stdout, stderr, exit_code, lasts: Duration::ZERO, stdin: Stdin::Ignored }
    }
}

/// The answer to `command` in `container` of `pod` under `settings` (the default: the
/// minimal shell, over the container's environment `env`).
pub fn answer(settings: Option<&Exec>, command: &[String], pod: &str, container: &str, env: &Container) -> Answer {
    let s = settings.cloned().unwrap_or_default();
    match s.mode {
        ExecMode::Shell => {
            let (outcome, interactive) = match shell::invocation(command) {
                Invocation::Script(script) => (shell::run_script(script, env, 0), false),
                Invocation::Command(words) => (shell::run_command(words, env), false),
                Invocation::Interactive => (shell::Outcome::default(), true),
            };
            let stdin = match (interactive, outcome.reads_stdin) {
                (true, _) => Stdin::Shell(Box::new(env.clone())),
                (false, true) => Stdin::Echoed,
                (false, false) => Stdin::Ignored,
            };
            Answer { lasts: outcome.sleep, stdin, ..Answer::printed(outcome.stdout, outcome.stderr, outcome.exit_code) }
        }
        ExecMode::Echo => {
            Answer { stdin: Stdin::Echoed, ..Answer::printed(format!("{}\n", command.join(" ")), String::new(), 0) }
        }
        ExecMode::Reply => {
            Answer::printed(s.output.clone().unwrap_or_default(), String::new(), s.exit_code.unwrap_or(0).clamp(0, 255))
        }
        ExecMode::Refuse => Answer::printed(
            String::new(),
            format!(
                "kwok-pools: container {container} of pod {pod} is simulated and runs no commands \
                 (spec.lifecycle.pods.exec.mode is Refuse; set it to Shell, Echo or Reply to answer)\n"
            ),
            s.exit_code.filter(|c| *c != 0).unwrap_or(126).clamp(1, 255),
        ),
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
    fn shell_echo_reply_and_refuse() {
        let env = Container::default();
        let a = answer(None, &words(&["echo", "hello"]), "p", "c", &env);
        assert_eq!((a.stdout.as_str(), a.exit_code, &a.stdin), ("hello\n", 0, &Stdin::Ignored));
        let a = answer(None, &words(&["ls", "-l", "/"]), "p", "c", &env);
        assert_eq!(a.exit_code, 127);
        assert_eq!(answer(None, &words(&["cat"]), "p", "c", &env).stdin, Stdin::Echoed);
        assert!(matches!(answer(None, &words(&["sh"]), "p", "c", &env).stdin, Stdin::Shell(_)));
        let echo = Exec { mode: ExecMode::Echo, ..Default::default() };
        let a = answer(Some(&echo), &words(&["ls", "-l", "/"]), "p", "c", &env);
        assert_eq!((a.stdout.as_str(), a.exit_code, &a.stdin), ("ls -l /\n", 0, &Stdin::Echoed));
        let reply = Exec { mode: ExecMode::Reply, output: Some("ok\n".into()), exit_code: Some(3) };
        let a = answer(Some(&reply), &words(&["anything"]), "p", "c", &env);
        assert_eq!((a.stdout.as_str(), a.exit_code), ("ok\n", 3));
        let refuse = Exec { mode: ExecMode::Refuse, ..Default::default() };
        let a = answer(Some(&refuse), &words(&["sh"]), "web-0", "app", &env);
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
