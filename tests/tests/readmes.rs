//! Docs that cannot drift: every route the frontend serves, every flag of the three services (each README's
//! flag table is compared with the clap definitions both ways), every metric
//! they register and every source file of the crates listed here is named in its README (or, for metrics,
//! in telemetry/README.md, the operators' reference). A new flag, route, metric or file fails this test until
//! its README says what it is. Values the docs repeat from the code (the body limit, the tier label and its
//! values) are compared with the code, and no doc names an issue number or a scratch directory.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// Every `.rs` file below `dir` (relative to the repository), as paths relative to `dir`'s crate.
fn sources(crate_dir: &str) -> Vec<String> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let base = root().join(crate_dir);
    let mut files = Vec::new();
    walk(&base.join("src"), &mut files);
    let mut out: Vec<String> = files
        .iter()
        .map(|p| p.strip_prefix(&base).unwrap().display().to_string())
        .collect();
    out.sort();
    out
}

/// The quoted strings following `needle` in `text` (e.g. the paths of `.route("`).
fn quoted_after(text: &str, needle: &str) -> Vec<String> {
    text.match_indices(needle)
        .filter_map(|(i, _)| {
            let rest = text[i + needle.len()..].trim_start();
            let rest = rest.strip_prefix('"')?;
            Some(rest[..rest.find('"')?].to_string())
        })
        .collect()
}

/// Every path the frontend passes to `.route(`, in any of its source files.
fn frontend_routes() -> BTreeSet<String> {
    let mut routes = BTreeSet::new();
    for f in sources("webhook-frontend") {
        let text = read(&format!("webhook-frontend/{f}"));
        routes.extend(quoted_after(&text, ".route("));
    }
    assert!(routes.len() >= 7, "routes found: {routes:?}");
    routes
}

/// The admission webhooks among the routes: everything but the probes.
fn webhook_routes() -> Vec<String> {
    frontend_routes()
        .into_iter()
        .filter(|r| r != "/healthz" && r != "/readyz")
        .collect()
}

#[test]
fn every_route_the_frontend_serves_is_in_its_readme() {
    let readme = read("webhook-frontend/README.md");
    let routes = frontend_routes();
    let missing: Vec<_> = routes
        .iter()
        .filter(|r| !readme.contains(&format!("`{r}")) && !readme.contains(&format!("POST {r}")))
        .collect();
    assert!(
        missing.is_empty(),
        "routes not in webhook-frontend/README.md: {missing:?}"
    );
}

/// Every flag of the three services (hidden ones too, from their clap definitions), with whether `--help`
/// shows it.
fn service_flags() -> [(&'static str, BTreeMap<String, bool>); 3] {
    use clap::CommandFactory;
    let flags = |c: clap::Command| -> BTreeMap<String, bool> {
        gpu_admission_flags::long_flags(&c).into_iter().collect()
    };
    [
        (
            "webhook-frontend",
            flags(webhook_frontend::config::Args::command()),
        ),
        ("scorer", flags(scorer::cli::Cli::command())),
        ("observer", flags(observer::cli::Cli::command())),
    ]
}

/// A service README's flag table is its clap definition: every row's flag exists, every flag has a row, and a
/// row says "(hidden)" exactly when `--help` does not show the flag.
#[test]
fn each_services_flag_table_is_its_flags() {
    let mut wrong = Vec::new();
    for (service, real) in service_flags() {
        let readme_path = format!("{service}/README.md");
        let mut documented = BTreeMap::new();
        for line in read(&readme_path).lines() {
            let Some(cell) = line.strip_prefix("| `--") else {
                continue;
            };
            let cell = cell.split(" |").next().unwrap();
            let flag: String = cell
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            documented.insert(format!("--{flag}"), !cell.contains("(hidden)"));
        }
        for (flag, shown) in &real {
            match documented.get(flag) {
                None => wrong.push(format!("{readme_path}: no row for {flag}")),
                Some(d) if d != shown => wrong.push(format!(
                    "{readme_path}: {flag} is {} but its row says otherwise",
                    if *shown { "shown by --help" } else { "hidden" }
                )),
                Some(_) => {}
            }
        }
        for flag in documented.keys().filter(|f| !real.contains_key(*f)) {
            wrong.push(format!("{readme_path}: {flag} is no flag of {service}"));
        }
    }
    assert!(
        wrong.is_empty(),
        "flag tables that differ from the flags: {wrong:#?}"
    );
}

/// The top README's configuration table lists, per service, exactly the flags `--help` shows.
#[test]
fn the_top_readmes_flags_are_what_help_shows() {
    let readme = read("README.md");
    for (service, real) in service_flags() {
        let row = readme
            .lines()
            .find(|l| l.starts_with(&format!("| `{service}` |")))
            .unwrap_or_else(|| panic!("README.md: no configuration row for {service}"));
        let listed: BTreeSet<String> = row
            .split('|')
            .nth(2)
            .unwrap()
            .split(|c: char| c == '`' || c == ',' || c.is_whitespace())
            .filter(|w| w.starts_with("--"))
            .map(str::to_string)
            .collect();
        let shown: BTreeSet<String> = real
            .into_iter()
            .filter(|(_, shown)| *shown)
            .map(|(f, _)| f)
            .collect();
        assert_eq!(listed, shown, "README.md: the {service} row");
    }
}

#[test]
fn every_metric_is_in_a_readme() {
    let docs = format!(
        "{}{}{}{}",
        read("telemetry/README.md"),
        read("webhook-frontend/README.md"),
        read("scorer/README.md"),
        read("observer/README.md")
    );
    let mut missing = Vec::new();
    for (crate_dir, prefix) in [
        ("webhook-frontend", "gpu_admission_"),
        ("scorer", ""),
        ("observer", ""),
    ] {
        for f in sources(crate_dir) {
            let text = read(&format!("{crate_dir}/{f}"));
            for needle in ["register(", "register_with_unit("] {
                for name in quoted_after(&text, needle) {
                    let full = format!("{prefix}{name}");
                    if !docs.contains(&full) {
                        missing.push(format!("{crate_dir}: {full}"));
                    }
                }
            }
        }
    }
    assert!(missing.is_empty(), "metrics no README names: {missing:#?}");
}

#[test]
fn every_source_file_is_in_its_crates_readme() {
    let mut missing = Vec::new();
    for crate_dir in [
        "webhook-frontend",
        "policy",
        "telemetry",
        "flags",
        "core",
        "observer",
        "scorer",
        "loadgen",
        "cli",
    ] {
        let readme = read(&format!("{crate_dir}/README.md"));
        for f in sources(crate_dir) {
            let name = Path::new(&f)
                .file_name()
                .unwrap()
                .to_string_lossy()
                .to_string();
            let dir = Path::new(&f).parent().unwrap().display().to_string();
            // Tests, and the crate's entry points (what the README as a whole describes).
            let not_listed = name == "tests.rs"
                || name.ends_with("_tests.rs")
                || f == "src/lib.rs"
                || f == "src/main.rs";
            // A directory is named as `src/x/` or `x/`; its `mod.rs` goes with it.
            let dir_named = readme.contains(&format!("`{dir}/`"))
                || readme.contains(&format!("`{}/`", dir.trim_start_matches("src/")));
            let named = readme.contains(&format!("`{f}`"))
                || readme.contains(&format!("`{}`", f.trim_start_matches("src/")))
                || (dir_named && (name == "mod.rs" || readme.contains(&name)));
            if !not_listed && !named {
                missing.push(format!("{crate_dir}/{f}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "source files no README names: {missing:#?}"
    );
}

/// The CLI install line the READMEs give (`cargo install --path cli --locked`) names the package
/// cargo knows at that path, and it holds the binary the READMEs then run; the binary the test run built
/// (`cargo build --workspace --bins`, no second compilation) answers `--help` with the commands they name.
#[test]
fn the_cli_install_line_names_cargos_package_and_binary() {
    let metadata = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args([
            "metadata",
            "--no-deps",
            "--format-version",
            "1",
            "--offline",
        ])
        .current_dir(root())
        .output()
        .expect("cargo metadata runs");
    assert!(
        metadata.status.success(),
        "{}",
        String::from_utf8_lossy(&metadata.stderr)
    );
    let metadata: serde_json::Value = serde_json::from_slice(&metadata.stdout).unwrap();
    for readme in ["README.md", "cli/README.md"] {
        let text = read(readme);
        let line = text
            .lines()
            .find(|l| l.trim_start().starts_with("cargo install --path "))
            .unwrap_or_else(|| panic!("{readme}: no `cargo install --path` line"));
        let mut words = line.split_whitespace().skip(3);
        let path = words.next().unwrap();
        assert_eq!(words.next(), Some("--locked"), "{readme}: {line}");
        let manifest = root().join(path).join("Cargo.toml").canonicalize().unwrap();
        let package = metadata["packages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| Path::new(p["manifest_path"].as_str().unwrap()) == manifest)
            .unwrap_or_else(|| panic!("{readme}: no package at {path}"));
        let bins: Vec<&str> = package["targets"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| t["kind"][0] == "bin")
            .filter_map(|t| t["name"].as_str())
            .collect();
        assert_eq!(bins, ["gpu-admission"], "{readme}: {path}");
        assert!(text.contains("gpu-admission --help"), "{readme}");
    }
    gpu_admission_tests::binaries::binaries();
    let bin = gpu_admission_tests::binaries::profile_dir()
        .unwrap()
        .join("gpu-admission");
    let out = Command::new(&bin)
        .arg("--help")
        .output()
        .expect("--help runs");
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}: {help}", bin.display());
    for command in ["check", "test", "policy", "floor", "dra", "quota", "kueue"] {
        assert!(
            help.lines().any(|l| l.trim_start().starts_with(command)),
            "{command} not in:\n{help}"
        );
    }
}

/// The README's disk figure is the one `.ci/run` compares its measured peak with at its end: one
/// `peak disk use: N GiB` in README.md, read by `.ci/run` with that very phrase.
#[test]
fn the_readmes_disk_figure_is_the_one_ci_run_checks() {
    const PHRASE: &str = "peak disk use: ";
    let readme = read("README.md");
    let figures: Vec<f64> = readme
        .match_indices(PHRASE)
        .map(|(i, _)| {
            let rest = &readme[i + PHRASE.len()..];
            let number = rest.split(" GiB").next().unwrap();
            number
                .parse()
                .unwrap_or_else(|_| panic!("README.md: {PHRASE}{number}: not a number of GiB"))
        })
        .collect();
    assert_eq!(
        figures.len(),
        1,
        "README.md: one `{PHRASE}N GiB`: {figures:?}"
    );
    assert!((1.0..100.0).contains(&figures[0]), "{figures:?}");
    let ci = read(".ci/run");
    assert!(
        ci.contains(&format!("'{PHRASE}[0-9.]* GiB'")),
        ".ci/run does not read the README's `{PHRASE}N GiB`"
    );
}

/// README.md's list of webhooks (the bullets under "several admission webhooks") and webhook-frontend/README.md's
/// opening paragraph each name every webhook the frontend serves.
#[test]
fn every_webhook_the_frontend_serves_is_in_the_webhook_lists() {
    let readme = read("README.md");
    let start = readme
        .find("several admission webhooks:")
        .expect("README.md: the list of webhooks (\"several admission webhooks:\")");
    // the list starts after the blank line that follows the heading sentence and ends at the next one
    let list_start = start
        + readme[start..]
            .find("\n\n")
            .expect("a list after the sentence")
        + 2;
    let list_end = readme[list_start..]
        .find("\n\n")
        .map_or(readme.len(), |i| list_start + i);
    let list = &readme[start..list_end];
    let frontend = read("webhook-frontend/README.md");
    let opening = frontend
        .split("\n\n")
        .nth(1)
        .expect("webhook-frontend/README.md: an opening paragraph");
    let mut missing = Vec::new();
    for route in webhook_routes() {
        for (what, text) in [
            ("README.md's webhook list", list),
            ("webhook-frontend/README.md's opening paragraph", opening),
        ] {
            if !text.contains(&format!("`{route}`")) && !text.contains(&format!("POST {route}`")) {
                missing.push(format!("{what}: {route}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "webhooks the docs do not list: {missing:#?}"
    );
}

/// The request-body limit in MiB, from the frontend's `BODY_LIMIT_BYTES` (a product of integers).
fn body_limit_mib() -> u64 {
    const NEEDLE: &str = "BODY_LIMIT_BYTES: usize = ";
    let mut found = Vec::new();
    for f in sources("webhook-frontend") {
        let text = read(&format!("webhook-frontend/{f}"));
        for (i, _) in text.match_indices(NEEDLE) {
            let expr = &text[i + NEEDLE.len()..];
            let expr = &expr[..expr.find(';').expect("`;` after BODY_LIMIT_BYTES")];
            let bytes: u64 = expr
                .split('*')
                .map(|n| {
                    n.trim()
                        .replace('_', "")
                        .parse::<u64>()
                        .unwrap_or_else(|_| panic!("{f}: {expr}"))
                })
                .product();
            found.push(bytes);
        }
    }
    assert_eq!(
        found.len(),
        1,
        "one BODY_LIMIT_BYTES in webhook-frontend: {found:?}"
    );
    assert_eq!(
        found[0] % (1024 * 1024),
        0,
        "a whole number of MiB: {found:?}"
    );
    found[0] / (1024 * 1024)
}

/// The numbers in `text` written as `N MiB` right after `prefix` (e.g. "beyond " → "beyond 24 MiB").
fn mib_after(text: &str, prefix: &str) -> Vec<String> {
    text.match_indices(prefix)
        .filter_map(|(i, _)| {
            let rest = &text[i + prefix.len()..];
            let number: String = rest
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == '.')
                .collect();
            (!number.is_empty() && rest[number.len()..].starts_with(" MiB")).then_some(number)
        })
        .collect()
}

/// What the docs say the body limit is (`413` beyond N MiB, the N MiB limit) is the frontend's constant.
#[test]
fn the_body_limit_the_docs_state_is_the_codes() {
    let limit = body_limit_mib().to_string();
    let mut stated = Vec::new();
    for readme in readmes() {
        let text = read(&readme);
        for line in text.lines() {
            let mut numbers = Vec::new();
            if line.contains("413") {
                numbers.extend(mib_after(line, "beyond "));
            }
            for (i, _) in line.match_indices(" MiB limit") {
                let before = &line[..i];
                let number: String = before
                    .chars()
                    .rev()
                    .take_while(|c| c.is_ascii_digit() || *c == '.')
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect();
                if !number.is_empty() {
                    numbers.push(number);
                }
            }
            stated.extend(numbers.into_iter().map(|n| (readme.clone(), n)));
        }
    }
    assert!(
        stated
            .iter()
            .any(|(r, _)| r == "webhook-frontend/README.md"),
        "webhook-frontend/README.md states no body limit (\"`413` beyond N MiB\")"
    );
    let wrong: Vec<_> = stated.iter().filter(|(_, n)| *n != limit).collect();
    assert!(
        wrong.is_empty(),
        "body limits that are not the code's {limit} MiB: {wrong:?}"
    );
}

/// The tier label the docs name is the code's default, and every value they give it (`LABEL=gold`,
/// `LABEL: gold`, `--namespace-tier ns=gold,…`) is a tier of the default policy.
#[test]
fn the_tier_label_and_its_values_in_the_docs_are_the_codes() {
    const NEEDLE: &str = "DEFAULT_TIER_LABEL: &str =";
    let labels: BTreeSet<String> = sources("policy")
        .iter()
        .flat_map(|f| quoted_after(&read(&format!("policy/{f}")), NEEDLE))
        .collect();
    assert_eq!(
        labels.len(),
        1,
        "one DEFAULT_TIER_LABEL in policy: {labels:?}"
    );
    let label = labels.into_iter().next().unwrap();
    let policy: serde_yaml::Value =
        serde_yaml::from_str(&read("deploy/kustomize/base/policy/default-policy.yaml")).unwrap();
    let tiers: BTreeSet<String> = policy["tiers"]
        .as_sequence()
        .expect("the default policy's tiers")
        .iter()
        .filter_map(|t| t["name"].as_str().map(str::to_string))
        .collect();
    assert!(tiers.len() >= 2, "{tiers:?}");
    let value = |rest: &str| -> String {
        rest.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
            .collect()
    };
    let mut values = Vec::new();
    let mut label_named = false;
    for doc in docs() {
        let text = read(&doc);
        label_named |= text.contains(&label);
        for sep in ["=", ": ", ":"] {
            for (i, _) in text.match_indices(&format!("{label}{sep}")) {
                let v = value(&text[i + label.len() + sep.len()..]);
                if !v.is_empty() {
                    values.push((doc.clone(), v));
                }
            }
        }
        for (i, _) in text.match_indices("--namespace-tier ") {
            let list = &text[i + "--namespace-tier ".len()..];
            let list: String = list
                .chars()
                .take_while(|c| !c.is_whitespace() && *c != '`')
                .collect();
            for pair in list.split(',') {
                if let Some((_, tier)) = pair.split_once('=') {
                    // `NS=TIER`: the placeholder, not a value
                    if tier != "TIER" && tier != "TIER..." {
                        values.push((doc.clone(), value(tier)));
                    }
                }
            }
        }
    }
    assert!(label_named, "no doc names the tier label {label}");
    assert!(
        values.len() >= 3,
        "tier values found in the docs: {values:?}"
    );
    let unknown: Vec<_> = values.iter().filter(|(_, v)| !tiers.contains(v)).collect();
    assert!(
        unknown.is_empty(),
        "tier label values that are no tier of the default policy {tiers:?}: {unknown:?}"
    );
}

/// No doc names an issue number ("issue 37", "(issue 38)", "issues 12 and 14"): a doc says what a thing is,
/// not which issue made it. A link to another project's issue is written as `owner#N`.
#[test]
fn no_doc_names_an_issue_number() {
    let mut found = Vec::new();
    for doc in docs() {
        let text = read(&doc);
        for (n, line) in text.lines().enumerate() {
            let lower = line.to_lowercase();
            for (i, _) in lower.match_indices("issue") {
                let rest = lower[i + "issue".len()..].trim_start_matches('s');
                let rest = rest.strip_prefix(' ').unwrap_or("");
                let rest = rest.strip_prefix('#').unwrap_or(rest);
                if rest.starts_with(|c: char| c.is_ascii_digit()) {
                    found.push(format!("{doc}:{}: {line}", n + 1));
                }
            }
        }
    }
    assert!(found.is_empty(), "docs naming an issue number: {found:#?}");
}

/// No doc points into a scratch directory (`/tmp/...`) that exists only on the machine it was written on.
#[test]
fn no_doc_points_into_a_scratch_directory() {
    let found: Vec<String> = docs()
        .into_iter()
        .flat_map(|doc| {
            read(&doc)
                .lines()
                .enumerate()
                .filter(|(_, l)| l.contains("/tmp/"))
                .map(|(n, l)| format!("{doc}:{}: {l}", n + 1))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(found.is_empty(), "docs pointing into /tmp: {found:#?}");
}

/// Every README.md of the repository (relative paths).
fn readmes() -> Vec<String> {
    docs()
        .into_iter()
        .filter(|d| d.ends_with("README.md"))
        .collect()
}

/// Every Markdown file of the repository (relative paths), build outputs and hidden directories left out.
fn docs() -> Vec<String> {
    fn walk(dir: &Path, base: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().to_string();
            if p.is_dir() {
                if !name.starts_with('.')
                    && name != "target"
                    && name != "run"
                    && name != "node_modules"
                {
                    walk(&p, base, out);
                }
            } else if name.ends_with(".md") {
                out.push(p.strip_prefix(base).unwrap().display().to_string());
            }
        }
    }
    let base = root().canonicalize().unwrap();
    let mut out = Vec::new();
    walk(&base, &base, &mut out);
    out.sort();
    assert!(out.len() >= 10, "docs found: {out:?}");
    out
}

/// GitHub's anchor of a Markdown heading: lower case, punctuation but `-` and `_` dropped, spaces as `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == '-' || *c == '_' || *c == ' ')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a Markdown file's headings (outside code blocks).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut fence = false;
    let mut out = BTreeSet::new();
    for line in text.lines() {
        if line.starts_with("```") {
            fence = !fence;
        } else if !fence && line.starts_with('#') {
            let heading = line.trim_start_matches('#');
            if heading.starts_with(' ') {
                out.insert(anchor(heading));
            }
        }
    }
    out
}

/// Every relative link of every Markdown file (`[text](path)`, `[text](path#anchor)`, `[text](#anchor)`)
/// leads to a file that exists and, for a Markdown file, to one of its headings: a moved file or a renamed
/// heading fails here.
#[test]
fn every_relative_link_resolves() {
    let base = root().canonicalize().unwrap();
    let mut broken = Vec::new();
    for doc in docs() {
        let text = read(&doc);
        let dir = Path::new(&doc).parent().unwrap().to_path_buf();
        for (i, _) in text.match_indices("](") {
            let rest = &text[i + 2..];
            let Some(end) = rest.find(')') else { continue };
            let target = &rest[..end];
            if target.contains(char::is_whitespace)
                || target.starts_with("http:")
                || target.starts_with("https:")
                || target.starts_with("mailto:")
            {
                continue;
            }
            let (path, fragment) = target.split_once('#').unwrap_or((target, ""));
            let file = if path.is_empty() {
                base.join(&doc)
            } else {
                base.join(&dir).join(path)
            };
            if !file.exists() {
                broken.push(format!("{doc}: {target} (no such file)"));
                continue;
            }
            let is_md = file.extension().is_some_and(|x| x == "md");
            if !fragment.is_empty() && is_md {
                let text = std::fs::read_to_string(&file).unwrap();
                if !anchors(&text).contains(fragment) {
                    broken.push(format!("{doc}: {target} (no such heading)"));
                }
            }
        }
    }
    assert!(broken.is_empty(), "links that lead nowhere: {broken:#?}");
}
