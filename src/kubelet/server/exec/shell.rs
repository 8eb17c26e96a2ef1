//! The minimal shell a simulated container answers `kubectl exec` with: a handful of builtins
//! (`echo`, `true`, `false`, `env`, `printenv`, `hostname`, `cat`, `sleep`, `exit`, `pwd`,
//! `:`), `sh -c` scripts joined by `;`, `&&`, `||` and newlines, quoting, `$VAR` and `$?`, and
//! discarding redirections to `/dev/null`. Anything else is "not found", exit 127, as in a
//! container without that binary. Nothing runs: every answer is computed from the container's
//! environment and files ([`Container`]). Pure.

use std::collections::BTreeMap;
use std::time::Duration;

/// What a container's commands see.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Container {
    /// Its environment, in the order the kubelet sets it.
    pub env: Vec<(String, String)>,
    /// The files `cat` can read (path → content).
    pub files: BTreeMap<String, String>,
}

impl Container {
    fn var(&self, name: &str) -> Option<&str> {
        self.env.iter().rev().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
}

/// What a run printed and how it ended.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Outcome {
    pub stdout: String,
    pub stderr: String,
    pub exit_code: i32,
    /// How long its `sleep`s make it last.
    pub sleep: Duration,
    /// Its last command copies stdin to stdout (`cat` with no file).
    pub reads_stdin: bool,
    /// It ran `exit` (an interactive session ends).
    pub exited: bool,
}

/// The longest a session's `sleep`s last in all.
pub const MOST_SLEEP: Duration = Duration::from_secs(3600);

/// The shells a command line may start.
const SHELLS: [&str; 5] = ["sh", "bash", "ash", "dash", "zsh"];

/// How a command line starts: a script to run, an interactive shell, or one command.
#[derive(Debug, PartialEq)]
pub enum Invocation<'a> {
    Script(&'a str),
    Interactive,
    Command(&'a [String]),
}

/// What `kubectl exec … -- <words>` asks for.
pub fn invocation(words: &[String]) -> Invocation<'_> {
    match words {
        [shell, rest @ ..] if SHELLS.contains(&base(shell)) => match rest {
            [] => Invocation::Interactive,
            [flag, script, ..] if flag.starts_with('-') && flag.contains('c') => Invocation::Script(script),
            [flag] if flag == "-i" || flag == "-l" || flag == "-il" => Invocation::Interactive,
            _ => Invocation::Command(words),
        },
        _ => Invocation::Command(words),
    }
}

fn base(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// Runs one command given as words (no expansion: exec passes them as they are). An unknown
/// binary fails as the container runtime fails it.
pub fn run_command(words: &[String], c: &Container) -> Outcome {
    let mut out = Outcome::default();
    match words.first() {
        None => {
            out.stderr = "kwok-pools: no command given\n".into();
            out.exit_code = 126;
        }
        Some(first) if !is_builtin(base(first)) => {
            out.stderr = format!(
                "exec failed: unable to start container process: exec: \"{first}\": executable file not found in $PATH (simulated container: its shell knows {})\n",
                BUILTINS.join(", ")
            );
            out.exit_code = 127;
        }
        Some(_) => builtin(words, c, &mut out),
    }
    out
}

/// Runs a script as `sh -c` does, with the shell's own "not found".
pub fn run_script(script: &str, c: &Container, last_status: i32) -> Outcome {
    let mut out = Outcome { exit_code: last_status, ..Outcome::default() };
    let steps = match parse(script) {
        Ok(s) => s,
        Err(e) => {
            out.stderr = format!("sh: syntax error: {e}\n");
            out.exit_code = 2;
            return out;
        }
    };
    for step in steps {
        let wanted = match step.after {
            Join::Always => true,
            Join::And => out.exit_code == 0,
            Join::Or => out.exit_code != 0,
        };
        if !wanted || step.words.is_empty() {
            continue;
        }
        let words = expand(&step.words, c, out.exit_code);
        let mut one = Outcome::default();
        let name = base(&words[0]);
        if is_builtin(name) {
            builtin(&words, c, &mut one);
        } else {
            one.stderr = format!("sh: {name}: not found\n");
            one.exit_code = 127;
        }
        if !step.quiet_out {
            out.stdout.push_str(&one.stdout);
        }
        match (step.quiet_err, step.err_to_out) {
            (true, _) => {}
            (false, true) => out.stdout.push_str(&one.stderr),
            (false, false) => out.stderr.push_str(&one.stderr),
        }
        out.exit_code = one.exit_code;
        out.sleep = (out.sleep + one.sleep).min(MOST_SLEEP);
        out.reads_stdin = one.reads_stdin;
        if one.exited {
            out.exited = true;
            break;
        }
    }
    out
}

const BUILTINS: [&str; 11] =
    ["echo", "true", "false", "env", "printenv", "hostname", "cat", "sleep", "exit", "pwd", ":"];

fn is_builtin(name: &str) -> bool {
    BUILTINS.contains(&name)
}

fn builtin(words: &[String], c: &Container, out: &mut Outcome) {
    let args = &words[1..];
    match base(&words[0]) {
        "echo" => {
            let (newline, args) = match args.first().map(String::as_str) {
                Some("-n") => (false, &args[1..]),
                _ => (true, args),
            };
            out.stdout = args.join(" ");
            if newline {
                out.stdout.push('\n');
            }
        }
        "true" | ":" => {}
        "false" => out.exit_code = 1,
        "env" => out.stdout = c.env.iter().map(|(k, v)| format!("{k}={v}\n")).collect(),
        "printenv" if args.is_empty() => out.stdout = c.env.iter().map(|(k, v)| format!("{k}={v}\n")).collect(),
        "printenv" => {
            for name in args {
                match c.var(name) {
                    Some(v) => out.stdout.push_str(&format!("{v}\n")),
                    None => out.exit_code = 1,
                }
            }
        }
        "hostname" => out.stdout = format!("{}\n", c.var("HOSTNAME").unwrap_or_default()),
        "pwd" => out.stdout = "/\n".into(),
        "cat" if args.iter().all(|a| a.starts_with('-')) => out.reads_stdin = true,
        "cat" => {
            // Options (`-n`, `-A`…) change nothing a simulated file shows.
            for path in args.iter().filter(|a| !a.starts_with('-')) {
                match c.files.get(path.as_str()) {
                    Some(content) => out.stdout.push_str(content),
                    None => {
                        out.stderr.push_str(&format!("cat: {path}: No such file or directory\n"));
                        out.exit_code = 1;
                    }
                }
            }
        }
        "sleep" => match args.iter().map(|a| sleep_for(a)).sum::<Option<Duration>>() {
            Some(d) if !args.is_empty() => out.sleep = d.min(MOST_SLEEP),
            _ => {
                out.stderr = format!("sleep: invalid time interval '{}'\n", args.join(" "));
                out.exit_code = 1;
            }
        },
        "exit" => {
            out.exited = true;
            out.exit_code = match args.first() {
                None => 0,
                Some(a) => a.parse::<i64>().map_or(2, |n| n.rem_euclid(256) as i32),
            };
        }
        _ => {}
    }
}

/// `sleep`'s operand: a number of seconds with an optional `s`, `m`, `h` or `d` suffix.
fn sleep_for(arg: &str) -> Option<Duration> {
    let (number, unit) = match arg.char_indices().last()? {
        (i, c @ ('s' | 'm' | 'h' | 'd')) => (&arg[..i], c),
        _ => (arg, 's'),
    };
    let n: f64 = number.parse().ok().filter(|n: &f64| n.is_finite() && *n >= 0.0)?;
    let scale = match unit {
        'm' => 60.0,
        'h' => 3600.0,
        'd' => 86400.0,
        _ => 1.0,
    };
    Some(Duration::from_secs_f64((n * scale).min(MOST_SLEEP.as_secs_f64())))
}

/// How a command joins the one before it.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Join {
    Always,
    And,
    Or,
}

/// One word as written: its pieces, each literal or a variable to expand.
#[derive(Clone, Debug, PartialEq)]
enum Piece {
    Text(String),
    Var(String),
}

/// One command of a script: its words, how it joins the one before, where its output goes.
#[derive(Debug)]
struct Parsed {
    words: Vec<Vec<Piece>>,
    after: Join,
    quiet_out: bool,
    quiet_err: bool,
    err_to_out: bool,
}

impl Parsed {
    fn new(after: Join) -> Self {
        Parsed { words: Vec::new(), after, quiet_out: false, quiet_err: false, err_to_out: false }
    }
}

fn expand(words: &[Vec<Piece>], c: &Container, status: i32) -> Vec<String> {
    words
        .iter()
        .map(|pieces| {
            pieces
                .iter()
                .map(|p| match p {
                    Piece::Text(t) => t.clone(),
                    Piece::Var(v) if v == "?" => status.to_string(),
                    Piece::Var(v) => c.var(v).unwrap_or_default().to_string(),
                })
                .collect()
        })
        .collect()
}

/// Splits a script into commands: words with quotes and `$` variables, the operators that join
/// them, and redirections.
fn parse(script: &str) -> Result<Vec<Parsed>, String> {
    let mut p = Parser {
        chars: script.chars().peekable(),
        steps: Vec::new(),
        step: Parsed::new(Join::Always),
        word: Vec::new(),
        in_word: false,
    };
    while let Some(ch) = p.chars.next() {
        match ch {
            '\'' => p.single_quoted()?,
            '"' => p.double_quoted()?,
            '\\' => {
                p.in_word = true;
                match p.chars.next() {
                    Some('\n') | None => {}
                    Some(c) => p.text(c),
                }
            }
            '$' => {
                p.in_word = true;
                variable(&mut p.chars, &mut p.word);
            }
            '#' if !p.in_word => while p.chars.next_if(|c| *c != '\n').is_some() {},
            ' ' | '\t' => p.end_word(),
            ';' | '\n' => p.end_step(Join::Always),
            '&' if p.chars.next_if_eq(&'&').is_some() => p.end_step(Join::And),
            '|' if p.chars.next_if_eq(&'|').is_some() => p.end_step(Join::Or),
            '|' => return Err("pipes are not simulated (the simulated shell runs builtins one by one)".into()),
            '&' => return Err("background jobs are not simulated".into()),
            '<' => return Err("input redirection is not simulated".into()),
            '>' => p.redirection()?,
            c => {
                p.in_word = true;
                p.text(c);
            }
        }
    }
    p.end_step(Join::Always);
    Ok(p.steps)
}

struct Parser<'a> {
    chars: std::iter::Peekable<std::str::Chars<'a>>,
    steps: Vec<Parsed>,
    step: Parsed,
    word: Vec<Piece>,
    in_word: bool,
}

impl Parser<'_> {
    fn text(&mut self, ch: char) {
        match self.word.last_mut() {
            Some(Piece::Text(t)) => t.push(ch),
            _ => self.word.push(Piece::Text(ch.to_string())),
        }
    }

    fn end_word(&mut self) {
        if self.in_word {
            self.step.words.push(std::mem::take(&mut self.word));
            self.in_word = false;
        }
    }

    fn end_step(&mut self, next: Join) {
        self.end_word();
        let done = std::mem::replace(&mut self.step, Parsed::new(next));
        self.steps.push(done);
    }

    fn single_quoted(&mut self) -> Result<(), String> {
        self.in_word = true;
        loop {
            match self.chars.next() {
                Some('\'') => return Ok(()),
                Some(c) => self.text(c),
                None => return Err("unterminated quoted string".into()),
            }
        }
    }

    fn double_quoted(&mut self) -> Result<(), String> {
        self.in_word = true;
        loop {
            match self.chars.next() {
                Some('"') => return Ok(()),
                Some('\\') => match self.chars.next() {
                    Some(c @ ('"' | '\\' | '$' | '`')) => self.text(c),
                    Some(c) => {
                        self.text('\\');
                        self.text(c);
                    }
                    None => return Err("unterminated quoted string".into()),
                },
                Some('$') => variable(&mut self.chars, &mut self.word),
                Some(c) => self.text(c),
                None => return Err("unterminated quoted string".into()),
            }
        }
    }

    /// After `>`: `>file`, `>>file`, `2>file`, `2>&1` (the fd is the digit word just before).
    fn redirection(&mut self) -> Result<(), String> {
        let fd = match (self.in_word, self.word.as_slice()) {
            (true, [Piece::Text(t)]) if t == "1" || t == "2" => {
                let fd = if t == "2" { 2 } else { 1 };
                self.word.clear();
                self.in_word = false;
                fd
            }
            _ => {
                self.end_word();
                1
            }
        };
        self.chars.next_if_eq(&'>');
        if self.chars.next_if_eq(&'&').is_some() {
            return match self.chars.next() {
                Some('1') if fd == 2 => {
                    self.step.err_to_out = true;
                    Ok(())
                }
                Some('2') if fd == 1 => Ok(()),
                _ => Err("only 2>&1 duplicates a descriptor here".into()),
            };
        }
        while self.chars.next_if_eq(&' ').is_some() {}
        let target: String = std::iter::from_fn(|| self.chars.next_if(|c| !c.is_whitespace() && *c != ';')).collect();
        if target != "/dev/null" {
            return Err(format!(
                "cannot create {target}: the simulated container has no writable files (redirect to /dev/null)"
            ));
        }
        if fd == 2 {
            self.step.quiet_err = true;
        } else {
            self.step.quiet_out = true;
        }
        Ok(())
    }
}

/// A variable after `$`: `$NAME`, `${NAME}`, `$?`; a lone `$` is itself.
fn variable(chars: &mut std::iter::Peekable<std::str::Chars<'_>>, word: &mut Vec<Piece>) {
    match chars.peek() {
        Some('?') => {
            chars.next();
            word.push(Piece::Var("?".into()));
        }
        Some('{') => {
            chars.next();
            let name: String = std::iter::from_fn(|| chars.next_if(|c| *c != '}')).collect();
            chars.next();
            word.push(Piece::Var(name));
        }
        Some(c) if c.is_ascii_alphabetic() || *c == '_' => {
            let name: String =
                std::iter::from_fn(|| chars.next_if(|c| c.is_ascii_alphanumeric() || *c == '_')).collect();
            word.push(Piece::Var(name));
        }
        _ => word.push(Piece::Text("$".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(w: &[&str]) -> Vec<String> {
        w.iter().map(|s| s.to_string()).collect()
    }

    fn container() -> Container {
        Container {
            env: vec![("HOSTNAME".into(), "web-0".into()), ("GREETING".into(), "hi there".into())],
            files: [("/etc/hostname".to_string(), "web-0\n".to_string())].into(),
        }
    }

    #[test]
    fn exec_words_run_builtins_and_unknown_binaries_exit_127() {
        let c = container();
        let o = run_command(&words(&["echo", "hello"]), &c);
        assert_eq!((o.stdout.as_str(), o.exit_code), ("hello\n", 0));
        // exec passes words as they are: no expansion.
        assert_eq!(run_command(&words(&["/bin/echo", "$GREETING"]), &c).stdout, "$GREETING\n");
        assert_eq!(run_command(&words(&["false"]), &c).exit_code, 1);
        assert_eq!(run_command(&words(&["hostname"]), &c).stdout, "web-0\n");
        assert_eq!(run_command(&words(&["printenv", "GREETING"]), &c).stdout, "hi there\n");
        assert_eq!(run_command(&words(&["printenv", "NOPE"]), &c).exit_code, 1);
        assert_eq!(run_command(&words(&["env"]), &c).stdout, "HOSTNAME=web-0\nGREETING=hi there\n");
        let o = run_command(&words(&["nginx", "-s", "reload"]), &c);
        assert_eq!(o.exit_code, 127);
        assert!(o.stderr.contains("\"nginx\": executable file not found"), "{}", o.stderr);
        let o = run_command(&words(&["cat", "/etc/hostname", "/missing"]), &c);
        assert_eq!((o.stdout.as_str(), o.exit_code), ("web-0\n", 1));
        assert!(o.stderr.contains("/missing: No such file"));
        assert!(run_command(&words(&["cat"]), &c).reads_stdin);
        assert!(run_command(&words(&["cat", "-n"]), &c).reads_stdin);
        assert_eq!(run_command(&words(&["cat", "-A", "/etc/hostname"]), &c).stdout, "web-0\n");
        assert_eq!(run_command(&words(&["sleep", "1.5"]), &c).sleep, Duration::from_millis(1500));
        assert_eq!(run_command(&words(&["sleep", "2m"]), &c).sleep, Duration::from_secs(120));
        assert_eq!(run_command(&words(&["sleep", "1e9"]), &c).sleep, MOST_SLEEP);
        assert_eq!(run_command(&words(&["sleep", "soon"]), &c).exit_code, 1);
    }

    #[test]
    fn scripts_expand_quote_and_join() {
        let c = container();
        let o = run_script("echo \"$GREETING\" '$GREETING' ${HOSTNAME}; false || echo fell back $?", &c, 0);
        assert_eq!(o.stdout, "hi there $GREETING web-0\nfell back 1\n");
        assert_eq!(o.exit_code, 0);
        let o = run_script("true && echo yes; false && echo never", &c, 0);
        assert_eq!((o.stdout.as_str(), o.exit_code), ("yes\n", 1));
        let o = run_script("curl -s localhost", &c, 0);
        assert_eq!((o.stderr.as_str(), o.exit_code), ("sh: curl: not found\n", 127));
        let o = run_script("cat /nope 2>/dev/null; echo a >/dev/null; cat /nope 2>&1", &c, 0);
        assert_eq!((o.stdout.as_str(), o.stderr.as_str()), ("cat: /nope: No such file or directory\n", ""));
        let o = run_script("echo one\nexit 3\necho never", &c, 0);
        assert_eq!((o.stdout.as_str(), o.exit_code, o.exited), ("one\n", 3, true));
        let o = run_script("echo 'unterminated", &c, 0);
        assert_eq!(o.exit_code, 2);
        assert!(o.stderr.contains("unterminated"), "{}", o.stderr);
        let o = run_script("ps aux | grep x", &c, 0);
        assert_eq!(o.exit_code, 2);
        assert!(o.stderr.contains("pipes are not simulated"), "{}", o.stderr);
        assert_eq!(run_script("echo x > /tmp/f", &c, 0).exit_code, 2);
        assert_eq!(run_script("sleep 1; sleep 2s", &c, 0).sleep, Duration::from_secs(3));
        assert_eq!(run_script("# only a comment", &c, 0).exit_code, 0);
    }

    #[test]
    fn invocations() {
        let w = words(&["/bin/sh", "-c", "echo hi", "arg0"]);
        assert_eq!(invocation(&w), Invocation::Script("echo hi"));
        assert_eq!(invocation(&words(&["bash", "-ec", "x"])), Invocation::Script("x"));
        assert_eq!(invocation(&words(&["sh"])), Invocation::Interactive);
        assert_eq!(invocation(&words(&["bash", "-il"])), Invocation::Interactive);
        let w = words(&["echo", "sh"]);
        assert_eq!(invocation(&w), Invocation::Command(&w));
    }
}
