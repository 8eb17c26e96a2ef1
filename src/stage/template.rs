//! kwok's status templates rendered as kwok renders them (Go's template language, with kwok's
//! functions: `Now`, `Quote`, `YAML`, `Version`, `NodeConditions`, `NodeIP`, `NodeName`,
//! `NodePort`, `NodeIPWith`, `NodeIPsWith`, `PodIP`, `PodIPWith`, `PodIPsWith`, and the sprig
//! functions its stages use), against a sample object: the importer reads what a stage writes
//! from the rendered YAML rather than guessing from the template's text. Addresses come out as
//! documentation addresses (192.0.2.x), times as one fixed instant.

use gtmpl::{Context, FuncError, Template, Value};
use std::collections::HashMap;

/// The instant `Now` renders as.
pub const NOW: &str = "2026-01-01T00:00:00Z";

fn string(s: &str) -> Value {
    Value::String(s.to_string())
}

fn json_to_value(v: &serde_json::Value) -> Value {
    match v {
        serde_json::Value::Null => Value::Nil,
        serde_json::Value::Bool(b) => Value::Bool(*b),
        serde_json::Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => Value::from(i),
            (None, Some(f)) => Value::from(f),
            _ => Value::Nil,
        },
        serde_json::Value::String(s) => string(s),
        serde_json::Value::Array(a) => Value::Array(a.iter().map(json_to_value).collect()),
        serde_json::Value::Object(o) => Value::Map(o.iter().map(|(k, v)| (k.clone(), json_to_value(v))).collect()),
    }
}

fn value_to_json(v: &Value) -> serde_json::Value {
    match v {
        Value::Nil | Value::NoValue => serde_json::Value::Null,
        Value::Bool(b) => serde_json::Value::Bool(*b),
        Value::String(s) => serde_json::Value::String(s.clone()),
        Value::Number(n) => n
            .as_i64()
            .map(serde_json::Value::from)
            .or_else(|| n.as_f64().map(serde_json::Value::from))
            .unwrap_or(serde_json::Value::Null),
        Value::Array(a) => serde_json::Value::Array(a.iter().map(value_to_json).collect()),
        Value::Map(m) | Value::Object(m) => {
            serde_json::Value::Object(m.iter().map(|(k, v)| (k.clone(), value_to_json(v))).collect())
        }
        Value::Function(_) => serde_json::Value::Null,
    }
}

fn now(_: &[Value]) -> Result<Value, FuncError> {
    Ok(string(NOW))
}

/// kwok's `Quote`: the JSON of the value, quoted again unless it is a string; nothing is
/// `"null"`.
fn quote(args: &[Value]) -> Result<Value, FuncError> {
    let json = value_to_json(args.first().unwrap_or(&Value::Nil));
    let text = serde_json::to_string(&json).unwrap_or_default();
    Ok(string(&if text.starts_with('"') { text } else { serde_json::to_string(&text).unwrap_or_default() }))
}

/// kwok's `YAML`: the value as YAML, indented by `indent * 2` spaces after a newline.
fn yaml(args: &[Value]) -> Result<Value, FuncError> {
    let json = value_to_json(args.first().unwrap_or(&Value::Nil));
    let text = serde_yaml::to_string(&json).map_err(|e| FuncError::Generic(e.to_string()))?;
    let indent = args.get(1).and_then(|v| if let Value::Number(n) = v { n.as_i64() } else { None }).unwrap_or(0);
    if indent <= 0 {
        return Ok(string(&text));
    }
    let pad = " ".repeat((indent * 2) as usize);
    let body: String = text.lines().map(|l| format!("\n{pad}{l}")).collect();
    Ok(string(&body))
}

fn version(_: &[Value]) -> Result<Value, FuncError> {
    Ok(string("v0.8.0"))
}

/// kwok's five healthy node conditions.
fn node_conditions(_: &[Value]) -> Result<Value, FuncError> {
    let c = |t: &str, s: &str, r: &str, m: &str| {
        Value::Map(
            [("type", t), ("status", s), ("reason", r), ("message", m)]
                .iter()
                .map(|(k, v)| (k.to_string(), string(v)))
                .collect(),
        )
    };
    Ok(Value::Array(vec![
        c("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
        c("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
        c("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        c("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        c("NetworkUnavailable", "False", "RouteCreated", "RouteController created a route"),
    ]))
}

fn node_ip(_: &[Value]) -> Result<Value, FuncError> {
    Ok(string("192.0.2.1"))
}

fn node_ips(_: &[Value]) -> Result<Value, FuncError> {
    Ok(Value::Array(vec![string("192.0.2.1")]))
}

fn pod_ip(_: &[Value]) -> Result<Value, FuncError> {
    Ok(string("192.0.2.100"))
}

fn pod_ips(_: &[Value]) -> Result<Value, FuncError> {
    Ok(Value::Array(vec![string("192.0.2.100")]))
}

fn node_name(_: &[Value]) -> Result<Value, FuncError> {
    Ok(string("node-0"))
}

fn node_port(_: &[Value]) -> Result<Value, FuncError> {
    Ok(Value::from(10250i64))
}

/// sprig's `dict`: a map of key/value pairs.
fn dict(args: &[Value]) -> Result<Value, FuncError> {
    let mut map = HashMap::new();
    for pair in args.chunks(2) {
        let key = match pair.first() {
            Some(Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
            None => continue,
        };
        map.insert(key, pair.get(1).cloned().unwrap_or(Value::Nil));
    }
    Ok(Value::Map(map))
}

/// `template` with Go's variable assignments (`{{ $v = x }}`, Go 1.11) written as declarations
/// (`{{ $v := x }}`), which the renderer takes: a variable assigned inside a block then keeps
/// its outer value outside it, which changes nothing of what the importer reads (the phase,
/// the conditions, the container states).
pub fn declarations(template: &str) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(open) = rest.find("{{") {
        let (before, action) = rest.split_at(open);
        out.push_str(before);
        let end = action.find("}}").map_or(action.len(), |e| e + 2);
        let (inner, after) = action.split_at(end);
        out.push_str(&assignment_as_declaration(inner));
        rest = after;
    }
    out.push_str(rest);
    out
}

/// One action `{{ … }}`: `$name =` (not `:=`, not `==`) becomes `$name :=`.
fn assignment_as_declaration(action: &str) -> String {
    let body = action.trim_start_matches("{{").trim_start_matches('-').trim_start();
    let Some(var) = body.strip_prefix('$') else { return action.to_string() };
    let name_len = var.chars().take_while(|c| c.is_alphanumeric() || *c == '_').count();
    let after = var[name_len..].trim_start();
    if after.starts_with('=') && !after.starts_with("==") {
        let at = action.len() - body.len() + 1 + name_len + (var[name_len..].len() - after.len());
        return format!("{}:{}", &action[..at], &action[at..]);
    }
    action.to_string()
}

/// Renders `template` against `object` (its JSON form), as kwok would: the YAML it writes.
pub fn render(template: &str, object: &serde_json::Value) -> Result<serde_json::Value, String> {
    let template = declarations(template);
    let template = template.as_str();
    let mut t = Template::default();
    let funcs: [(&str, gtmpl::Func); 14] = [
        ("Now", now),
        ("Quote", quote),
        ("YAML", yaml),
        ("Version", version),
        ("NodeConditions", node_conditions),
        ("NodeIP", node_ip),
        ("NodeIPWith", node_ip),
        ("NodeIPsWith", node_ips),
        ("PodIP", pod_ip),
        ("PodIPWith", pod_ip),
        ("PodIPsWith", pod_ips),
        ("NodeName", node_name),
        ("NodePort", node_port),
        ("dict", dict),
    ];
    for (name, f) in funcs {
        t.add_func(name, f);
    }
    t.parse(template.trim()).map_err(|e| format!("the template does not parse: {e}"))?;
    let text =
        t.render(&Context::from(json_to_value(object))).map_err(|e| format!("the template does not render: {e}"))?;
    let value: serde_json::Value =
        serde_yaml::from_str(&text).map_err(|e| format!("the template renders YAML that does not parse: {e}"))?;
    Ok(if value.is_null() { serde_json::json!({}) } else { value })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn assignments_become_declarations_and_nothing_else_changes() {
        assert_eq!(
            declarations("{{ $a := 1 }}{{ if x }}{{ $a = true }}{{ end }}"),
            "{{ $a := 1 }}{{ if x }}{{ $a := true }}{{ end }}"
        );
        assert_eq!(
            declarations("{{- $b=2 -}} {{ eq $a 1 }} {{ $c == 3 }}"),
            "{{- $b:=2 -}} {{ eq $a 1 }} {{ $c == 3 }}"
        );
        let out =
            render("{{ $x := false }}\n{{ if true }}{{ $x = true }}{{ end }}\nphase: Running\n", &json!({})).unwrap();
        assert_eq!(out["phase"], "Running");
    }

    #[test]
    fn kwoks_own_forms_render() {
        let pod = json!({"metadata": {"name": "p", "annotations": {"x": "y"}}, "spec": {"nodeName": "n", "containers": [{"name": "a", "image": "i"}]}});
        let out = render(
            "{{ $now := Now }}\n{{ $annotations := or .metadata.annotations dict }}\n{{ $n := or ( index $annotations \"x\" ) \"\" }}\ncontainerStatuses:\n{{ range $index, $item := .spec.containers }}\n- name: {{ $item.name | Quote }}\n  startedAt: {{ $now | Quote }}\n  note: {{ $n }}\n{{ end }}\nhostIP: {{ NodeIPWith .spec.nodeName | Quote }}\nphase: Running\n",
            &pod,
        )
        .unwrap();
        assert_eq!(out["phase"], "Running");
        assert_eq!(out["containerStatuses"][0]["name"], "a");
        assert_eq!(out["containerStatuses"][0]["note"], "y");
        assert_eq!(out["hostIP"], "192.0.2.1");
    }
}
