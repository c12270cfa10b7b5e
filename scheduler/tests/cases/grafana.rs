//! deploy/grafana/mlcc.json may only query what the daemons export: every `mlcc_*` series
//! name in its PromQL (panels and template variables) must be one mlccd or mlcc-switchd
//! actually writes on /metrics, and every label it selects or groups by must be a label of
//! those series. Renaming a metric or a label in the code without fixing the dashboard fails
//! here instead of leaving operators with empty panels.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use mlcc_scheduler::metrics as sched;
use mlcc_switch_emu::metrics as switch;

/// Labels Prometheus adds when scraping, and the bucket bound of histograms.
const SCRAPE_LABELS: [&str; 2] = ["instance", "job"];

/// Series name → its label names, from both daemons' real exposition with one child of every
/// labelled family created (a family with no child writes no sample line).
fn exported() -> BTreeMap<String, BTreeSet<String>> {
    let s = sched::Metrics::new();
    s.rpc_seconds
        .get_or_create(&sched::RpcLabels {
            method: "exchange",
            target: "h2".into(),
            outcome: "ok",
        })
        .observe(0.001);
    let flow = sched::FlowLabels { flow: "f".into() };
    s.planned.get_or_create(&flow).set(1.0);
    s.achieved.get_or_create(&flow).set(1.0);
    let mode = sched::ModeLabels {
        mode: "switch_unreachable",
    };
    s.degraded.get_or_create(&mode).set(1);
    s.degraded_slots.get_or_create(&mode).inc();
    s.skew_slots
        .get_or_create(&sched::TargetLabels {
            target: "tor1".into(),
        })
        .set(0);
    s.skew_seconds
        .get_or_create(&sched::TargetLabels {
            target: "tor1".into(),
        })
        .set(0.0);
    let w = switch::Metrics::new();
    w.rpcs
        .get_or_create(&switch::RpcLabels {
            method: "session",
            code: "ok",
        })
        .inc();
    let method = switch::MethodLabels { method: "session" };
    w.rpc_seconds.get_or_create(&method).observe(0.001);
    w.items.get_or_create(&method).inc();
    w.rejected
        .get_or_create(&switch::RejectLabels {
            method: "session",
            reason: "r".into(),
        })
        .inc();
    let link = switch::LinkLabels {
        link: "tor1->h1".into(),
    };
    w.link_entries.get_or_create(&link).set(1);
    w.link_load.get_or_create(&link).set(1.0);
    w.sessions_ended
        .get_or_create(&switch::SessionEndLabels { reason: "closed" })
        .inc();

    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for text in [s.encode(), w.encode()] {
        for line in text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
        {
            let end = line.find(['{', ' ']).unwrap_or(line.len());
            let labels = out.entry(line[..end].to_string()).or_default();
            if let Some(body) = line[end..]
                .strip_prefix('{')
                .and_then(|b| b.split_once('}'))
            {
                for pair in body.0.split(',') {
                    if let Some((k, _)) = pair.split_once('=') {
                        labels.insert(k.trim().to_string());
                    }
                }
            }
        }
    }
    out
}

/// Every PromQL string of the dashboard: panel targets and template variable queries.
fn queries(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, v) in m {
                match (k.as_str(), v) {
                    ("expr" | "definition", serde_json::Value::String(s)) => out.push(s.clone()),
                    ("query", serde_json::Value::String(s)) if s.contains("mlcc_") => {
                        out.push(s.clone())
                    }
                    _ => queries(v, out),
                }
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|v| queries(v, out)),
        _ => {}
    }
}

/// The panels' PromQL (`expr`); template variables use Grafana's `label_values(...)` instead.
fn panel_exprs(v: &serde_json::Value) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(panels) = v.get("panels").and_then(|p| p.as_array()) {
        for p in panels {
            for t in p
                .get("targets")
                .and_then(|t| t.as_array())
                .into_iter()
                .flatten()
            {
                if let Some(e) = t.get("expr").and_then(|e| e.as_str()) {
                    out.push(e.to_string());
                }
            }
            out.extend(panel_exprs(p));
        }
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The `mlcc_*` series in `expr`, each with the label names of its `{...}` selector.
fn selectors(expr: &str) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    let mut rest = expr;
    while let Some(i) = rest.find("mlcc_") {
        // Only at the start of an identifier.
        if i > 0 && rest[..i].chars().next_back().is_some_and(is_ident) {
            rest = &rest[i + 5..];
            continue;
        }
        let tail = &rest[i..];
        let end = tail.find(|c: char| !is_ident(c)).unwrap_or(tail.len());
        let name = tail[..end].to_string();
        let mut labels = Vec::new();
        let after = &tail[end..];
        if let Some(body) = after.strip_prefix('{').and_then(|b| b.split_once('}')) {
            for m in body.0.split(',') {
                let k: String = m.trim().chars().take_while(|c| is_ident(*c)).collect();
                if !k.is_empty() {
                    labels.push(k);
                }
            }
        }
        out.push((name, labels));
        rest = after;
    }
    out
}

/// Label names in `by (...)` / `without (...)` clauses of `expr`.
fn grouping(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    for kw in ["by", "without"] {
        let mut rest = expr;
        while let Some(i) = rest.find(kw) {
            let before_ok = i == 0 || !rest[..i].chars().next_back().is_some_and(is_ident);
            let tail = rest[i + kw.len()..].trim_start();
            if before_ok && let Some(body) = tail.strip_prefix('(').and_then(|b| b.split_once(')'))
            {
                out.extend(
                    body.0
                        .split(',')
                        .map(|l| l.trim().to_string())
                        .filter(|l| !l.is_empty()),
                );
            }
            rest = &rest[i + kw.len()..];
        }
    }
    out
}

#[test]
fn dashboard_queries_only_exported_metrics_and_labels() {
    let exported = exported();
    // Sanity: the exposition was read (names with their suffixes, labels with their names).
    assert!(exported.contains_key("mlcc_sched_slot_work_seconds_bucket"));
    assert!(exported["mlcc_switch_rpcs_total"].contains("code"));

    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/grafana/mlcc.json");
    let text = std::fs::read_to_string(&path).unwrap();
    let dash: serde_json::Value = serde_json::from_str(&text).expect("mlcc.json is not JSON");
    let mut qs = Vec::new();
    queries(&dash, &mut qs);
    assert!(qs.len() >= 10, "only {} queries found", qs.len());

    let mut errors = Vec::new();
    let mut used = BTreeSet::new();
    for q in panel_exprs(&dash) {
        // Grafana substitutes its range variables before Prometheus sees the query.
        let promql = q
            .replace("$__rate_interval", "1m")
            .replace("$__interval", "1m");
        if let Err(e) = promql_parser::parser::parse(&promql) {
            errors.push(format!("{q:?} is not valid PromQL: {e}"));
        }
    }
    for q in &qs {
        let sels = selectors(q);
        if sels.is_empty() {
            errors.push(format!("{q:?} queries no mlcc_ metric"));
        }
        let mut known: BTreeSet<String> = SCRAPE_LABELS.iter().map(|s| s.to_string()).collect();
        for (name, labels) in &sels {
            used.insert(name.clone());
            let Some(have) = exported.get(name) else {
                errors.push(format!(
                    "{q:?}: {name} is not exported by mlccd or mlcc-switchd"
                ));
                continue;
            };
            known.extend(have.iter().cloned());
            for l in labels {
                if !have.contains(l) && !SCRAPE_LABELS.contains(&l.as_str()) {
                    errors.push(format!("{q:?}: {name} has no label {l:?}"));
                }
            }
        }
        for l in grouping(q) {
            if !known.contains(&l) {
                errors.push(format!(
                    "{q:?}: groups by {l:?}, a label none of its series has"
                ));
            }
        }
    }
    assert!(errors.is_empty(), "{}", errors.join("\n"));
    // Every metric family shows up somewhere (a histogram through any of its series).
    let families: BTreeSet<String> = exported
        .keys()
        .map(|n| {
            ["_bucket", "_sum", "_count", "_total"]
                .iter()
                .find_map(|s| n.strip_suffix(s))
                .unwrap_or(n)
                .to_string()
        })
        .collect();
    let unused: Vec<_> = families
        .iter()
        .filter(|f| !used.iter().any(|u| u.starts_with(f.as_str())))
        .collect();
    assert!(unused.is_empty(), "metrics no panel shows: {unused:?}");
}

#[test]
fn the_checker_catches_a_wrong_name_and_label() {
    let exported = exported();
    let s = selectors(
        r#"sum by (le, foo) (rate(mlcc_sched_rpc_seconds_bucket{outcome="ok", bar=~"x"}[1m]))"#,
    );
    assert_eq!(
        s,
        vec![(
            "mlcc_sched_rpc_seconds_bucket".to_string(),
            vec!["outcome".to_string(), "bar".to_string()]
        )]
    );
    assert!(!exported["mlcc_sched_rpc_seconds_bucket"].contains("bar"));
    assert!(!exported.contains_key("mlcc_sched_rpc_seconds"));
    assert_eq!(
        grouping("sum by (le, foo) (x) / sum without(a)(y)"),
        ["le", "foo", "a"]
    );
}
