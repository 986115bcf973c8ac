use super::*;

/// Parses and converts, as `main` does.
fn config(args: &[&str]) -> anyhow::Result<Config> {
    let mut argv = vec!["webhook-frontend"];
    argv.extend(args);
    Config::try_from(Args::try_parse_from(argv)?)
}

#[test]
fn contract_flags_parse() {
    let a = Args::try_parse_from([
        "webhook-frontend",
        "--listen",
        "127.0.0.1:0",
        "--scorer",
        "http://127.0.0.1:50051",
        "--tls=self-signed",
        "--tls-dir=/tmp/x",
        "--deadline-ms",
        "150",
        "--no-kube",
        "--namespace-tier",
        "ml=gold",
        "--namespace-tier",
        "batch=bronze",
        "--admin-listen",
        "127.0.0.1:0",
    ])
    .unwrap();
    assert_eq!(a.cluster.namespace_tiers, ["ml=gold", "batch=bronze"]);
    assert!(a.cluster.no_kube);
    let c = Config::try_from(a).unwrap();
    assert_eq!(c.scorer.deadline, Duration::from_millis(150));
    assert!(matches!(c.cluster, ClusterSource::Static { .. }));

    let a = Args::try_parse_from(["webhook-frontend", "--tls=files", "--tls-dir=a"]).unwrap();
    assert_eq!(a.server.listen.to_string(), "0.0.0.0:8443");
    assert_eq!(a.admin.admin_listen.to_string(), "0.0.0.0:9092");
    assert_eq!(a.scorer.deadline_ms, 200);
}

#[test]
fn tls_is_one_mode_and_its_settings() {
    assert!(Args::try_parse_from(["webhook-frontend"]).is_err());
    assert!(Args::try_parse_from(["webhook-frontend", "--tls=other"]).is_err());
    assert!(
        Args::try_parse_from([
            "webhook-frontend",
            "--tls=self-signed",
            "--tls-dir=d",
            "--namespace-tier",
            "a=b"
        ])
        .is_err()
    );
    // A mode without its setting, or with another mode's, is refused with the flag named.
    for (args, expected) in [
        (&["--tls=files"][..], "--tls=files needs --tls-dir"),
        (
            &["--tls=self-signed"][..],
            "--tls=self-signed needs --tls-dir",
        ),
        (&["--tls=auto"][..], "--tls=auto needs --tls-secret"),
        (
            &["--tls=auto", "--tls-secret=s", "--tls-dir=d"][..],
            "--tls-dir is a setting",
        ),
        (
            &["--tls=self-signed", "--tls-dir=d", "--tls-secret=s"][..],
            "--tls-secret is a setting of --tls=auto",
        ),
        (
            &["--tls=files", "--tls-dir=d", "--tls-webhook-config=w"][..],
            "--tls-webhook-config is a setting of --tls=auto",
        ),
        (
            &["--tls=files", "--tls-dir=d", "--san=x"][..],
            "--san names the SANs",
        ),
        (
            &["--tls=auto", "--tls-secret=ns/"][..],
            "expected [NAMESPACE/]NAME",
        ),
    ] {
        let err = config(args).unwrap_err().to_string();
        assert!(err.contains(expected), "{args:?}: {err}");
    }
}

#[test]
fn auto_tls_flags() {
    let c = config(&[
        "--tls=auto",
        "--tls-secret=gpu-admission-webhook-tls",
        "--tls-webhook-config=gpu-admission",
        "--san=gpu-admission-webhook.gpu-admission.svc",
        "--tls-renew-before-secs=60",
    ])
    .unwrap();
    let TlsMode::Auto {
        settings: auto,
        namespace: ns,
    } = c.tls
    else {
        panic!("not automatic: {:?}", c.tls)
    };
    assert_eq!(ns, None);
    assert_eq!(auto.secret, "gpu-admission-webhook-tls");
    assert_eq!(auto.webhook_config.as_deref(), Some("gpu-admission"));
    assert_eq!(auto.sans, ["gpu-admission-webhook.gpu-admission.svc"]);
    assert_eq!(auto.lifetimes.serving, time::Duration::days(90));
    assert_eq!(
        auto.lifetimes.renew_before,
        Some(time::Duration::seconds(60))
    );
    assert_eq!(auto.check_interval, Duration::from_secs(30));
    assert!(config(&["--tls=auto", "--tls-secret=s", "--tls-validity-days=4000"]).is_err());
    // The Secret's namespace, when given, is the prefix of its name.
    let c = config(&["--tls=auto", "--tls-secret=team/s"]).unwrap();
    let TlsMode::Auto {
        settings,
        namespace,
    } = c.tls
    else {
        panic!("not automatic: {:?}", c.tls)
    };
    assert_eq!(
        (namespace.as_deref(), settings.secret.as_str()),
        (Some("team"), "s")
    );
    let files = config(&["--tls=self-signed", "--tls-dir=d"]).unwrap();
    assert!(!matches!(files.tls, TlsMode::Auto { .. }));
}

#[test]
fn defaults_become_typed_values() {
    let c = config(&["--tls=files", "--tls-dir=/secret"]).unwrap();
    assert_eq!(c.server.listen.to_string(), "0.0.0.0:8443");
    assert_eq!(c.server.limits.first_request, Duration::from_secs(10));
    assert_eq!(c.server.limits.idle, Duration::from_secs(180));
    assert_eq!(c.server.limits.max_connections, 4096);
    assert_eq!(c.server.drain_timeout, Duration::from_secs(20));
    assert_eq!(c.scorer.endpoint, "http://127.0.0.1:50051");
    assert_eq!(c.scorer.deadline, Duration::from_millis(200));
    assert_eq!(c.scorer.deadline_margin, Duration::from_millis(50));
    assert_eq!(c.scorer.channel.max_in_flight, 1024);
    assert_eq!(c.scorer.channel.connections, 2);
    assert_eq!(c.scorer.policy_refresh, Duration::from_secs(30));
    assert_eq!(
        c.policy_configmap,
        PolicyConfigMap {
            namespace: "gpu-admission".into(),
            name: "gpu-admission-policy".into(),
            key: "default-policy.yaml".into(),
        }
    );
    let TlsMode::Files {
        files,
        reload_interval,
    } = &c.tls
    else {
        panic!("not files: {:?}", c.tls)
    };
    assert_eq!(files.cert, PathBuf::from("/secret/tls.crt"));
    assert_eq!(files.key, PathBuf::from("/secret/tls.key"));
    assert_eq!(*reload_interval, Duration::from_secs(2));
    let ClusterSource::Kube {
        checkpoint_discovery,
    } = &c.cluster
    else {
        panic!("not kube: {:?}", c.cluster)
    };
    assert_eq!(*checkpoint_discovery, Duration::from_secs(30));
}

#[test]
fn self_signed_mode_keeps_its_directory_and_names() {
    let dev = config(&[
        "--tls=self-signed",
        "--tls-dir=d",
        "--san",
        "a,b",
        "--no-kube",
    ])
    .unwrap();
    let TlsMode::SelfSigned { dir, sans, .. } = &dev.tls else {
        panic!("not self-signed: {:?}", dev.tls)
    };
    assert_eq!(dir.to_str(), Some("d"));
    assert_eq!(sans, &["a", "b"]);
    let ClusterSource::Static { tiers } = &dev.cluster else {
        panic!("not static: {:?}", dev.cluster)
    };
    assert!(tiers.is_empty());
}

#[test]
fn too_small_intervals_are_raised_to_their_floor() {
    let c = config(&[
        "--tls=self-signed",
        "--tls-dir=d",
        "--tls-poll-ms=0",
        "--header-read-timeout-ms=0",
        "--policy-refresh-secs=0",
        "--checkpoint-discovery-secs=0",
    ])
    .unwrap();
    let TlsMode::SelfSigned {
        reload_interval, ..
    } = c.tls
    else {
        panic!("not self-signed: {:?}", c.tls)
    };
    assert_eq!(reload_interval, Duration::from_millis(100));
    assert_eq!(c.server.limits.first_request, Duration::from_millis(1));
    assert_eq!(c.scorer.policy_refresh, Duration::from_secs(1));
    let ClusterSource::Kube {
        checkpoint_discovery,
        ..
    } = c.cluster
    else {
        panic!("not kube: {:?}", c.cluster)
    };
    assert_eq!(checkpoint_discovery, Duration::from_secs(1));
    let c = config(&["--tls=auto", "--tls-secret=s", "--tls-poll-ms=0"]).unwrap();
    let TlsMode::Auto { settings, .. } = c.tls else {
        panic!("not automatic: {:?}", c.tls)
    };
    assert_eq!(settings.check_interval, Duration::from_secs(1));
}

#[test]
fn limits_outside_their_range_are_refused_at_parse_time() {
    for flag in [
        "--scorer-max-in-flight=0",
        "--scorer-connections=0",
        "--scorer-connections=65",
        "--idle-timeout-secs=0",
        "--max-connections=0",
    ] {
        let err = config(&["--tls=self-signed", "--tls-dir=d", flag]).unwrap_err();
        let name = flag.split('=').next().unwrap();
        assert!(err.to_string().contains(name), "{flag}: {err}");
    }
}

#[test]
fn bad_values_are_refused_with_the_flag_named() {
    let cases: [(&[&str], &str); 6] = [
        (
            &["--no-kube", "--namespace-tier=ml"],
            "--namespace-tier \"ml\"",
        ),
        (
            &["--no-kube", "--namespace-tier=ml=", "--namespace-tier=a=b"],
            "--namespace-tier",
        ),
        (&["--policy-configmap=no-slash"], "--policy-configmap"),
        (&["--policy-key="], "--policy-configmap"),
        (
            &["--tls=auto", "--tls-secret=s", "--tls-validity-days=0"],
            "--tls-validity-days",
        ),
        (
            &[
                "--tls=auto",
                "--tls-secret=s",
                "--tls-validity-days=1",
                "--tls-renew-before-secs=86400",
            ],
            "--tls-renew-before-secs 86400 must be below the serving lifetime",
        ),
    ];
    for (args, expected) in cases {
        let mut argv = args.to_vec();
        if !argv[0].starts_with("--tls") {
            argv.extend(["--tls=self-signed", "--tls-dir=d"]);
        }
        let err = config(&argv).unwrap_err().to_string();
        assert!(err.contains(expected), "{args:?}: {err}");
    }
    // Just below the lifetime is a valid window.
    let c = config(&[
        "--tls=auto",
        "--tls-secret=s",
        "--tls-validity-days=1",
        "--tls-renew-before-secs=86399",
    ])
    .unwrap();
    let TlsMode::Auto { settings, .. } = c.tls else {
        panic!("not automatic: {:?}", c.tls)
    };
    assert_eq!(
        settings.lifetimes.renew_before,
        Some(time::Duration::seconds(86_399))
    );
}

/// The tier label is the policy's (`tierLabel`): no process has a flag for it.
#[test]
fn the_tier_label_is_no_flag() {
    assert!(config(&["--tls=self-signed", "--tls-dir=d", "--tier-label=x"]).is_err());
}

#[test]
fn restrict_to_namespaces_makes_a_restricted_instance() {
    use gpu_admission_core::ns_lock::Instance;
    let c = config(&["--tls=self-signed", "--tls-dir=/tmp/x"]).unwrap();
    assert_eq!(c.instance, Instance::ClusterWide);
    let c = config(&[
        "--tls=self-signed",
        "--tls-dir=/tmp/x",
        "--restrict-to-namespaces",
        "team-b,team-a",
    ])
    .unwrap();
    assert_eq!(c.instance, Instance::from_namespaces(["team-a", "team-b"]));
    assert_eq!(c.instance.name(), "restricted:team-a,team-b");
}

#[test]
fn a_restricted_instance_reads_its_tiers_and_states_when_it_gives_its_namespaces_back() {
    let c = config(&[
        "--tls=self-signed",
        "--tls-dir=d",
        "--no-kube",
        "--restrict-to-namespaces=gpu-team, lab",
        "--release-after-fallbacks=5",
        "--release-after-failing-secs=20",
    ])
    .unwrap();
    let ClusterSource::Namespaces { namespaces } = &c.cluster else {
        panic!("{:?}", c.cluster)
    };
    assert_eq!(namespaces, &["gpu-team", "lab"]);
    assert_eq!(c.hold_rule.max_fallbacks, 5);
    assert_eq!(c.hold_rule.max_failing, time::Duration::seconds(20));
    // The defaults: 3 fallbacks or 10 s.
    let c = config(&[
        "--tls=self-signed",
        "--tls-dir=d",
        "--no-kube",
        "--restrict-to-namespaces=a",
    ])
    .unwrap();
    assert_eq!(
        c.hold_rule,
        gpu_admission_core::ns_lock::hold::HoldRule::default()
    );
    // A stated tier is what goes stale: refused beside --restrict-to-namespaces.
    let err = config(&[
        "--tls=self-signed",
        "--tls-dir=d",
        "--no-kube",
        "--restrict-to-namespaces=a",
        "--namespace-tier=a=bronze",
    ])
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("--namespace-tier with --restrict-to-namespaces"),
        "{err}"
    );
    let err = config(&[
        "--tls=self-signed",
        "--tls-dir=d",
        "--restrict-to-namespaces=a",
        "--release-after-fallbacks=0",
    ])
    .unwrap_err()
    .to_string();
    assert!(err.contains("--release-after-fallbacks"), "{err}");
}
