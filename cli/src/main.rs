//! `gpu-admission`: the webhooks' answers for manifests, offline (see the crate documentation).
//!
//! Exit codes: 0 fine; 1 something would be denied (`check`), a test failed (`test`), the policy is invalid
//! (`policy validate`); 2 the input cannot be read (a usage error, an unreadable file or policy); 3 (`check`)
//! nothing denied, but a warning on stderr about the input: a tier the policy does not have, an object or a
//! GPU quantity the webhooks cannot decide (cli/README.md).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};
use gpu_admission_cli::load::Tiers;
use gpu_admission_cli::review::User;
use gpu_admission_cli::{Run, RunSettings, diff, policy, report, testfile};

#[derive(Parser, Debug)]
#[command(
    name = "gpu-admission",
    version,
    about = "What the gpu-admission webhooks would answer for manifests under a policy: offline, no cluster"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Check manifests: per object the verdict (allowed / warned / denied, with the message) and what
    /// /mutate-pod does to its Pods. Exit 1 when anything would be denied, else 3 when the input drew a
    /// warning on stderr (a tier the policy does not have, an object or quantity that cannot be decided).
    Check {
        /// Files or directories of manifests (YAML or JSON, several documents, Lists, AdmissionReviews).
        #[arg(short = 'f', long = "filename", required = true, num_args = 1..)]
        files: Vec<PathBuf>,
        #[command(flatten)]
        run: RunArgs,
        #[arg(short = 'o', long = "output", value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// Run every gpu-admission-test.yaml under DIR (expected verdicts and classes). Exit 1 when one fails.
    Test { dir: PathBuf },
    /// Validate a policy file or ConfigMap, or show what a policy change would change.
    Policy {
        #[command(subcommand)]
        command: PolicyCommand,
    },
    /// DRA objects rendered from the policy.
    Dra {
        #[command(subcommand)]
        command: DraCommand,
    },
    /// The floor: ValidatingAdmissionPolicies the kube-apiserver enforces with no gpu-admission process
    /// running.
    Floor {
        #[command(subcommand)]
        command: FloorCommand,
    },
    /// GPU quotas: a cluster's usage against the policy's limits.
    Quota {
        #[command(subcommand)]
        command: QuotaCommand,
    },
    /// Kueue objects for the policy's GPU quotas, for teams that prefer queueing to denial.
    Kueue {
        #[command(subcommand)]
        command: KueueCommand,
    },
}

#[derive(Subcommand, Debug)]
enum KueueCommand {
    /// Print ResourceFlavors (one per class), a ClusterQueue per tier with a quota (one cohort; nominal quota
    /// = min, borrowing limit = max - min, reclaiming its min by preemption), the Cohort lending the stated
    /// capacity beyond the mins, and LocalQueues for the quotas' namespaces, as YAML.
    Export {
        #[command(flatten)]
        source: PolicySource,
    },
}

#[derive(Subcommand, Debug)]
enum QuotaCommand {
    /// Usage against limits per tier, namespace and class, counted as the frontend counts it, from
    /// `kubectl get namespaces,nodes,pods -A -o json > cluster.json` (`-f -` is not read: give a file).
    Usage {
        #[arg(short = 'f', long = "filename", required = true, num_args = 1..)]
        files: Vec<PathBuf>,
        #[command(flatten)]
        source: PolicySource,
        /// `table`, or `yaml`: the usage snapshot `gpu-admission check --usage` reads.
        #[arg(short = 'o', long = "output", default_value = "table")]
        output: QuotaOutput,
    },
    /// Print the ResourceQuotas the observer writes (`--resource-quotas`) for GitOps installs: one
    /// `gpu-admission-quota` per namespace share, what the apiserver holds with every frontend down. Each
    /// share's namespace is taken as labelled with the share's tier unless the input's Namespaces
    /// (`kubectl get namespaces -o json`) or `--namespace` say otherwise.
    Render {
        #[arg(short = 'f', long = "filename", num_args = 1..)]
        files: Vec<PathBuf>,
        /// NAMESPACE=TIER (repeatable): the namespace's tier label.
        #[arg(long = "namespace", value_name = "NS=TIER")]
        namespaces: Vec<String>,
        #[command(flatten)]
        source: PolicySource,
    },
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum QuotaOutput {
    Table,
    Yaml,
}

/// The policy a rendering command reads.
#[derive(Args, Debug)]
struct PolicySource {
    /// Policy file or ConfigMap (default: the embedded default policy).
    #[arg(long)]
    policy: Option<PathBuf>,
    /// Key of the policy in a ConfigMap holding several.
    #[arg(long)]
    policy_key: Option<String>,
}

impl PolicySource {
    fn load(&self) -> anyhow::Result<scorer::policy::Policy> {
        let text = policy::read(self.policy.as_deref(), self.policy_key.as_deref())?;
        policy::parse(&text)
    }
}

#[derive(Subcommand, Debug)]
enum DraCommand {
    /// Print one DeviceClass per catalog GPU class with DRA devices (`<class lowercased>.gpu-admission.io`),
    /// as YAML for `kubectl apply -f -`.
    DeviceClasses {
        #[command(flatten)]
        source: PolicySource,
    },
}

#[derive(Subcommand, Debug)]
enum FloorCommand {
    /// Print the floor's policies, bindings and parameter object for a policy, as YAML.
    Render {
        #[command(flatten)]
        source: PolicySource,
        /// Print the placing floor instead (Kubernetes 1.36+): a MutatingAdmissionPolicy and its binding,
        /// reading the floor's parameter object.
        #[arg(long, conflicts_with = "static_dir")]
        placing: bool,
        /// Write the whole floor, parameters inline, as manifest-based admission files into DIR (Kubernetes
        /// 1.37+: loaded by the kube-apiserver at its start, not deletable through the API), with the
        /// AdmissionConfiguration that loads them; prints the apiserver flag.
        #[arg(long = "static", value_name = "DIR")]
        static_dir: Option<PathBuf>,
    },
}

#[derive(Subcommand, Debug)]
enum PolicyCommand {
    /// Validate a policy (the scorer's own validation) and summarise it. Exit 1 when invalid.
    Validate {
        policy: PathBuf,
        #[arg(long)]
        policy_key: Option<String>,
    },
    /// What changes, section by section and per object of MANIFESTS, from policy OLD to policy NEW.
    Diff {
        old: PathBuf,
        new: PathBuf,
        #[arg(short = 'f', long = "filename", required = true, num_args = 1..)]
        files: Vec<PathBuf>,
        #[command(flatten)]
        run: Box<RunArgs>,
    },
}

/// How objects are decided.
#[derive(Args, Debug)]
struct RunArgs {
    /// The policy: a policy file, or the policy ConfigMap as deployed. Default: the embedded default policy.
    #[arg(long)]
    policy: Option<PathBuf>,
    /// The ConfigMap key holding the policy (default: default-policy.yaml, or the only key).
    #[arg(long)]
    policy_key: Option<String>,
    /// Decide in this enforcement mode instead of the policy's (Enforce, Warn, Audit).
    #[arg(long)]
    mode: Option<String>,
    /// NAMESPACE=TIER (repeatable); `*=TIER` for every other namespace. Namespace objects in the input
    /// with a tier label count too.
    #[arg(long = "namespace", value_name = "NS=TIER")]
    namespaces: Vec<String>,
    /// The requester (default: an ordinary authenticated user); the Pods of workloads are created by their
    /// controller.
    #[arg(long)]
    user: Option<String>,
    /// A group of the requester (repeatable).
    #[arg(long = "group")]
    groups: Vec<String>,
    /// A power RBAC grants the requester in gpu-admission.io, as `kubectl auth can-i` spells it (repeatable):
    /// 'exempt tiers/TIER', 'update tiers/TIER', 'update policies', 'update jobtypes/JOB_TYPE'. Offline there
    /// is no apiserver to ask: default none. The Pods of workloads (created by their controller) get none.
    #[arg(long = "grant", value_name = "VERB RESOURCE[/NAME]")]
    grants: Vec<String>,
    /// A scorer learned-state snapshot (the scorer's --state file) to decide with; default: nothing learned.
    #[arg(long)]
    state: Option<PathBuf>,
    /// Decide as a frontend started with --no-kube: a Pod's workload is its first owner, its size unknown.
    #[arg(long)]
    no_kube: bool,
    /// The namespace of objects that name none.
    #[arg(long, default_value = "default")]
    default_namespace: String,
    /// A GPU quota usage snapshot (YAML or JSON: `namespaces: {NS: {tier, classes: {CLASS: milli-GPUs},
    /// total}}`): each GPU Pod of a tier with a quota is decided against it, and the admitted ones are added.
    #[arg(long)]
    usage: Option<PathBuf>,
}

#[derive(ValueEnum, Clone, Copy, Debug)]
enum Output {
    Text,
    Json,
}

impl RunArgs {
    fn settings(&self) -> anyhow::Result<RunSettings> {
        let mut requester = User::default_requester();
        if let Some(u) = &self.user {
            requester.username = u.clone();
        }
        requester.groups.extend(self.groups.iter().cloned());
        requester.grants = gpu_admission_cli::parse_grants(&self.grants)?;
        Ok(RunSettings {
            policy: self.policy.clone(),
            policy_key: self.policy_key.clone(),
            mode: self.mode.clone(),
            state: self.state.clone(),
            tiers: Tiers::parse(&self.namespaces)?,
            requester,
            no_kube: self.no_kube,
            default_namespace: self.default_namespace.clone(),
            usage: self.usage.clone(),
        })
    }
}

fn check(files: &[PathBuf], run: &RunArgs, output: Output) -> anyhow::Result<ExitCode> {
    let run = Run::new(&run.settings()?)?;
    let (version, mode) = (
        run.engine.policy().version.clone(),
        run.engine.policy().mode.as_str(),
    );
    let checked = run.check(files)?;
    match output {
        Output::Text => {
            println!("policy {version}, mode {mode}");
            print!("{}", report::text(&checked.evaluations, checked.counts));
        }
        Output::Json => println!(
            "{}",
            report::json(&checked.evaluations, checked.counts, &version, mode)
        ),
    }
    for w in &checked.warnings {
        eprintln!("gpu-admission: warning: {w}");
    }
    Ok(if checked.counts.denied > 0 {
        ExitCode::from(1)
    } else if !checked.warnings.is_empty() {
        ExitCode::from(EXIT_WARNED)
    } else {
        ExitCode::SUCCESS
    })
}

/// `check`: nothing denied, but the input drew a warning (stderr).
const EXIT_WARNED: u8 = 3;

fn test(dir: &std::path::Path) -> anyhow::Result<ExitCode> {
    let (mut passed, mut failed) = (0, 0);
    for file in testfile::find(dir)? {
        let outcome = testfile::run_file(&file)?;
        print!("{}", outcome.report);
        passed += outcome.passed;
        failed += outcome.failed;
    }
    println!("{passed} passed, {failed} failed");
    Ok(exit(failed == 0))
}

fn validate(path: &std::path::Path, key: Option<&str>) -> anyhow::Result<ExitCode> {
    let text = policy::read(Some(path), key)?;
    match policy::parse(&text) {
        Ok(parsed) => {
            println!("{}: valid", text.file);
            print!(
                "{}",
                policy::summary(&gpu_admission_cli::engine::snapshot_of(parsed))
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            println!("{e}");
            Ok(ExitCode::from(1))
        }
    }
}

/// Prints a rendering command's YAML.
/// `quota usage`: the table or the snapshot; warns on documents that look like Pods but do not read as one.
fn quota_usage(
    files: &[PathBuf],
    source: &PolicySource,
    output: QuotaOutput,
) -> anyhow::Result<ExitCode> {
    use gpu_admission_cli::{engine, load, quota};
    let snapshot = engine::snapshot_of(source.load()?);
    let inputs = load::inputs(&load::files(files)?)?;
    let mut tiers = Tiers::default();
    tiers.learn(&inputs, snapshot.tier_label());
    let counted = quota::count(&inputs, &tiers, &snapshot);
    for origin in &counted.unreadable {
        eprintln!("warning: {origin}: a Pod that does not read as one: not counted");
    }
    if counted.pods == 0 {
        eprintln!("warning: no Pod in the input (kubectl get namespaces,nodes,pods -A -o json)");
    }
    match output {
        QuotaOutput::Table => print!("{}", quota::table(&snapshot, &counted.usage)),
        QuotaOutput::Yaml => print!("{}", serde_yaml::to_string(&counted.usage)?),
    }
    Ok(ExitCode::SUCCESS)
}

/// `quota render`: the ResourceQuotas of the namespace shares, for the namespaces' tiers as given.
fn quota_render(
    files: &[PathBuf],
    pairs: &[String],
    source: &PolicySource,
) -> anyhow::Result<String> {
    use gpu_admission_cli::load;
    use gpu_admission_core::render::resource_quotas;
    let policy = source.load()?;
    let mut namespaces = resource_quotas::shares_as_labelled(&policy);
    if !files.is_empty() {
        for input in load::inputs(&load::files(files)?)? {
            if let load::Input::Namespace { name, labels } = input {
                namespaces.insert(name, labels.get(&policy.tier_label).cloned());
            }
        }
    }
    for p in pairs {
        match p.split_once('=') {
            Some((ns, tier)) if !ns.is_empty() => {
                namespaces.insert(ns.to_string(), (!tier.is_empty()).then(|| tier.to_string()));
            }
            _ => anyhow::bail!("--namespace {p:?}: expected NAMESPACE=TIER"),
        }
    }
    Ok(resource_quotas::render_yaml(&policy, &namespaces)?)
}

/// `floor render`: the floor, the placing floor (`--placing`), or the manifest-based files (`--static DIR`).
fn floor_render(
    source: &PolicySource,
    placing: bool,
    static_dir: Option<&std::path::Path>,
) -> anyhow::Result<String> {
    let policy = source.load()?;
    match static_dir {
        Some(dir) => gpu_admission_cli::floor::write_manifest_based(&policy, dir),
        None if placing => gpu_admission_cli::floor::render_placing_yaml(&policy),
        None => gpu_admission_cli::floor::render_yaml(&policy),
    }
}

fn print_yaml(yaml: anyhow::Result<String>) -> anyhow::Result<ExitCode> {
    print!("{}", yaml?);
    Ok(ExitCode::SUCCESS)
}

fn exit(ok: bool) -> ExitCode {
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Check { files, run, output } => check(files, run, *output),
        Command::Test { dir } => test(dir),
        Command::Dra {
            command: DraCommand::DeviceClasses { source },
        } => print_yaml(
            source
                .load()
                .and_then(|p| Ok(gpu_admission_core::render::device_classes::render_yaml(&p)?)),
        ),
        Command::Floor {
            command:
                FloorCommand::Render {
                    source,
                    placing,
                    static_dir,
                },
        } => print_yaml(floor_render(source, *placing, static_dir.as_deref())),
        Command::Quota {
            command:
                QuotaCommand::Usage {
                    files,
                    source,
                    output,
                },
        } => quota_usage(files, source, *output),
        Command::Quota {
            command:
                QuotaCommand::Render {
                    files,
                    namespaces,
                    source,
                },
        } => print_yaml(quota_render(files, namespaces, source)),
        Command::Kueue {
            command: KueueCommand::Export { source },
        } => print_yaml(
            source
                .load()
                .and_then(|p| Ok(gpu_admission_core::render::kueue::export_yaml(&p)?)),
        ),
        Command::Policy { command } => match command {
            PolicyCommand::Validate { policy, policy_key } => {
                validate(policy, policy_key.as_deref())
            }
            PolicyCommand::Diff {
                old,
                new,
                files,
                run,
            } => run.settings().and_then(|s| {
                let d = diff::diff(&s, old.clone(), new.clone(), files)?;
                print!("{}", diff::text(&d));
                Ok(ExitCode::SUCCESS)
            }),
        },
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("gpu-admission: {e:#}");
            ExitCode::from(2)
        }
    }
}
