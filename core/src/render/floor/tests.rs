use super::*;

fn policy(edit: impl FnOnce(&str) -> String) -> Policy {
    let text = edit(gpu_admission_policy::DEFAULT_POLICY_YAML);
    gpu_admission_policy::parse(&text, "test").expect("valid policy")
}

#[test]
fn parameters_carry_each_tiers_class_labels_and_cap() {
    let p = policy(|t| t.to_string());
    let d = params(&p).unwrap();
    assert_eq!(d["mode"], "Warn");
    assert_eq!(d["tiers"], "\nplatinum\ngold\nsilver\nbronze\n");
    assert_eq!(d["defaultTier"], "bronze");
    assert_eq!(d["untieredNamespaces"], "DefaultTier");
    assert_eq!(d["tier.bronze.classes"], "\ngpu.nvidia.com/class=L4-24GB\n");
    assert_eq!(d["tier.bronze.names"], "L4-24GB");
    assert_eq!(d["tier.bronze.restricts"], "true");
    assert_eq!(d["tier.bronze.cap"], "1000");
    assert_eq!(d["tier.bronze.capClass"], "gpu-default");
    assert_eq!(d["tier.bronze.capNever"], "true");
    assert_eq!(d["tier.gold.cap"], "100000");
    assert_eq!(d["tier.gold.capNever"], "false");
    assert!(d["tier.gold.classes"].contains("\ngpu.nvidia.com/class=H100-80GB\n"));
    assert!(!d["tier.gold.classes"].contains("H200"));
    // Who is exempt is RBAC's alone: no list of names reaches the floor.
    assert!(!d.contains_key("admins"));
    assert_eq!(d["grants"], "\n");
    assert_eq!(d["priorityClass.value.gpu-ultra"], "1000000");
    assert_eq!(
        d["priorityClass.preemption.gpu-ultra"],
        "PreemptLowerPriority"
    );
    assert_eq!(d["priorityClass.preemption.gpu-default"], "Never");
}

#[test]
fn a_grant_widens_every_tier_of_its_namespace_and_may_lift_the_restriction() {
    let p = policy(|t| {
        t.replace(
            "namespaceGrants: []",
            "namespaceGrants:\n  - namespace: research\n    allowedClasses: [H200-141GB]\n    maxPriorityClass: gpu-ultra",
        )
    });
    let d = params(&p).unwrap();
    assert_eq!(d["grants"], "\nresearch\n");
    assert_eq!(
        d["grant.research.bronze.classes"],
        "\ngpu.nvidia.com/class=H200-141GB\ngpu.nvidia.com/class=L4-24GB\n"
    );
    assert_eq!(d["grant.research.bronze.cap"], "1000000");
    assert_eq!(d["grant.research.bronze.capNever"], "false");
    // gold + H200 is the whole catalog: nothing left to hold a Pod to.
    assert_eq!(d["grant.research.gold.restricts"], "false");
    assert_eq!(d["tier.gold.restricts"], "true");
}

#[test]
fn render_gives_the_parameters_definition_the_policies_and_their_bindings() {
    let p = policy(|t| t.to_string());
    let rendered = render(&p, crate::names::DEFAULT_TIER_LABEL).unwrap();
    let (definition, objects) = rendered.split_first().unwrap();
    assert_eq!(definition["kind"], "CustomResourceDefinition");
    assert_eq!(definition["spec"]["group"], parameters::GROUP);
    assert_eq!(definition["spec"]["names"]["kind"], parameters::KIND);
    let kinds: Vec<&str> = objects
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
        ]
    );
    let names: Vec<&str> = objects
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        &names[..6],
        [
            POD_POLICY,
            POD_POLICY,
            WORKLOAD_POLICY,
            WORKLOAD_POLICY,
            NAMESPACE_POLICY,
            NAMESPACE_POLICY
        ]
    );
    // The tier label through the Namespace and every subresource that persists its labels.
    assert_eq!(
        objects[4]["spec"]["matchConstraints"]["resourceRules"][0]["resources"],
        json!(["namespaces", "namespaces/status", "namespaces/finalize"])
    );
    for b in [&objects[1], &objects[3], &objects[5]] {
        assert_eq!(b["spec"]["paramRef"]["parameterNotFoundAction"], "Deny");
        assert_eq!(b["spec"]["validationActions"], json!(["Deny"]));
    }
    assert_eq!(
        objects[1]["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"][0]["values"],
        json!(EXEMPT_NAMESPACES)
    );
    assert_eq!(
        objects[3]["spec"]["matchResources"],
        objects[1]["spec"]["matchResources"]
    );
    // Every policy reads the custom resource, never a ConfigMap.
    for o in objects
        .iter()
        .filter(|o| o["kind"] == "ValidatingAdmissionPolicy")
    {
        if let Some(kind) = o["spec"].get("paramKind") {
            assert_eq!(kind["kind"], parameters::KIND, "{}", o["metadata"]["name"]);
        }
    }
    let object = parameters::FloorParameters::object(params(&p).unwrap());
    assert_eq!(object["apiVersion"], "gpu-admission.io/v1alpha1");
    assert_eq!(object["metadata"]["name"], PARAMS_NAME);
    assert_eq!(object["data"], json!(params(&p).unwrap()));
    // Labelled as the floor's objects are, and as part of the installation kustomize labels.
    let labels = &object["metadata"]["labels"];
    for (k, v) in objects[1]["metadata"]["labels"].as_object().unwrap() {
        assert_eq!(&labels[k], v, "{k}");
    }
    assert_eq!(labels["app.kubernetes.io/part-of"], "gpu-admission");
    // Templates: the workload kinds of `workloads.validate.gpu-admission.io`, read through `variables.spec`.
    let rules = &objects[2]["spec"]["matchConstraints"]["resourceRules"];
    assert_eq!(
        rules[0]["resources"],
        json!(["deployments", "statefulsets", "daemonsets", "replicasets"])
    );
    assert_eq!(rules[1]["resources"], json!(["jobs", "cronjobs"]));
    let workloads = objects[2].to_string();
    assert!(
        workloads
            .contains("object.spec.jobTemplate.spec.template.spec : object.spec.template.spec")
    );
    assert!(!workloads.contains("resourceClaims"));
    let text = objects[0].to_string();
    assert!(text.contains("^nvidia[.]com/mig-[a-z0-9]+g[.][0-9]+gb$"));
    assert!(text.contains("authorizer.group('gpu-admission.io').resource('tiers')"));
    // A power granted only through a `*` is not held (the frontend's rule): the probes, and the superusers.
    for (what, text) in [("pods", &text), ("namespaces", &objects[4].to_string())] {
        for probe in [
            ".check('only-a-wildcard-grants-this')",
            ".resource('only-a-wildcard-grants-this')",
            "authorizer.group('only-a-wildcard-grants-this.gpu-admission.io')",
            "'system:masters' in request.userInfo.groups",
        ] {
            assert!(text.contains(probe), "{what}: {probe}");
        }
    }
}

#[test]
fn a_tier_no_namespace_label_can_name_is_refused() {
    let p = policy(|t| {
        t.replace("  - name: bronze\n", "  - name: bronze tier\n")
            .replace("defaultTier: bronze", "defaultTier: bronze tier")
    });
    assert_eq!(params(&p), Err(TierNameError("bronze tier".into())));
}

#[test]
fn the_placing_floor_reads_the_validating_floors_variables_and_parameters() {
    let p = policy(|t| t.to_string());
    let label = crate::names::DEFAULT_TIER_LABEL;
    let placing = render_placing(&p, label).unwrap();
    let [map, binding] = placing.as_slice() else {
        panic!("a policy and its binding: {placing:?}")
    };
    assert_eq!(map["kind"], "MutatingAdmissionPolicy");
    assert_eq!(binding["spec"]["policyName"], PLACING_POLICY);
    assert_eq!(binding["spec"]["paramRef"]["name"], PARAMS_NAME);
    let floor = render(&p, label).unwrap();
    let pods = floor
        .iter()
        .find(|o| o["metadata"]["name"] == POD_POLICY)
        .unwrap();
    // Every variable of the validating Pod policy, the same expression, in the same order, first.
    let theirs = pods["spec"]["variables"].as_array().unwrap();
    let ours = map["spec"]["variables"].as_array().unwrap();
    assert_eq!(&ours[..theirs.len()], theirs.as_slice());
    assert_eq!(
        map["spec"]["matchConditions"],
        pods["spec"]["matchConditions"]
    );
    // It never places a decided Pod, an exempt requester's, or one naming a class outside its tier.
    let place = ours.iter().find(|v| v["name"] == "place").unwrap()["expression"]
        .as_str()
        .unwrap()
        .to_string();
    for needed in [
        "!variables.decided",
        "!variables.exempt",
        "!variables.bound",
        "variables.gpu",
    ] {
        assert!(place.contains(needed), "{needed} in {place}");
    }
    let placement = map["spec"]["mutations"][0]["jsonPatch"]["expression"]
        .as_str()
        .unwrap();
    assert!(placement.contains(ANN_FLOOR_PLACED_KEY), "{placement}");
}

const ANN_FLOOR_PLACED_KEY: &str = crate::names::decision::ANN_FLOOR_PLACED;

#[test]
fn the_manifest_based_floor_is_the_api_floor_with_its_parameters_inline() {
    let p = policy(|t| t.replace("  mode: Warn", "  mode: Enforce"));
    let label = crate::names::DEFAULT_TIER_LABEL;
    let floor = render_manifest_based(&p, label).unwrap();
    assert_eq!(floor.validating.len(), 10, "five policies, five bindings");
    assert_eq!(floor.mutating.len(), 2);
    for object in floor.validating.iter().chain(&floor.mutating) {
        let name = object["metadata"]["name"].as_str().unwrap();
        assert!(name.ends_with(STATIC_SUFFIX), "{name}");
        let spec = &object["spec"];
        assert!(
            spec.get("paramKind").is_none() && spec.get("paramRef").is_none(),
            "{name}"
        );
        assert!(!object.to_string().contains("params.data"), "{name}");
        if let Some(policy_name) = spec.get("policyName") {
            assert!(policy_name.as_str().unwrap().ends_with(STATIC_SUFFIX));
        }
    }
    let pods = floor
        .validating
        .iter()
        .find(|o| o["metadata"]["name"] == format!("{POD_POLICY}{STATIC_SUFFIX}"))
        .unwrap();
    let first = &pods["spec"]["variables"][0];
    assert_eq!(first["name"], "params");
    let literal = first["expression"].as_str().unwrap();
    assert!(literal.contains("'mode': 'Enforce'"), "{literal}");
    // Newlines of list entries are escapes in the CEL literal, never raw.
    assert!(literal.contains("'tier.bronze.classes': '\\ngpu.nvidia.com/class=L4-24GB\\n'"));
    assert!(!literal.contains('\n'));
    // Otherwise the API floor's CEL: the same rule, reading the inline map.
    let api = render(&p, label).unwrap();
    let api_pods = api
        .iter()
        .find(|o| o["metadata"]["name"] == POD_POLICY)
        .unwrap();
    assert_eq!(
        pods["spec"]["validations"].to_string(),
        api_pods["spec"]["validations"]
            .to_string()
            .replace("params.data", "variables.params")
    );
}

/// DRA admin access: the Namespace label (through every path that persists it, on Namespaces carrying it) and
/// GPU claims asking for it need `use adminaccess`, by the authority rule (probes, `system:masters`); the label
/// policy reads no parameters, the claims policy the floor's (the cluster's GPU DeviceClasses, the scopes).
#[test]
fn dra_admin_access_needs_its_power_in_the_floor() {
    let p = policy(|t| t.to_string());
    let objects = render(&p, crate::names::DEFAULT_TIER_LABEL).unwrap();
    let [label, label_binding, claims, claims_binding] = &objects[7..] else {
        panic!("four admin access objects: {objects:?}")
    };
    assert_eq!(label["metadata"]["name"], ADMIN_ACCESS_POLICY);
    assert_eq!(claims["metadata"]["name"], ADMIN_CLAIMS_POLICY);
    assert_eq!(
        label["spec"]["matchConstraints"]["resourceRules"][0]["resources"],
        json!(["namespaces", "namespaces/status", "namespaces/finalize"])
    );
    assert_eq!(
        label_binding["spec"]["matchResources"]["objectSelector"]["matchExpressions"][0]["key"],
        "resource.kubernetes.io/admin-access"
    );
    assert_eq!(
        claims["spec"]["matchConstraints"]["resourceRules"][0]["resources"],
        json!(["resourceclaims", "resourceclaimtemplates"])
    );
    assert_eq!(claims_binding["spec"]["policyName"], ADMIN_CLAIMS_POLICY);
    for o in [label, label_binding] {
        assert!(o["spec"].get("paramKind").is_none() && o["spec"].get("paramRef").is_none());
    }
    assert_eq!(claims["spec"]["paramKind"]["kind"], parameters::KIND);
    assert_eq!(claims_binding["spec"]["paramRef"]["name"], PARAMS_NAME);
    assert_eq!(
        claims["spec"]["validations"][0]["expression"],
        "!variables.gpuAdmin || variables.mayAdmin"
    );
    assert_eq!(
        claims["spec"]["validations"][1]["expression"],
        "!variables.enforce || variables.tier == '' || !variables.outsideAdmin || variables.exempt"
    );
    for policy in [label, claims] {
        let vars = policy["spec"]["variables"].as_array().unwrap();
        let may = vars
            .iter()
            .position(|v| v["name"] == "mayAdminGranted")
            .unwrap();
        let vars = &vars[may..may + 5];
        // One authorizer question per variable: four in one expression exceed the per-expression cost limit.
        let names: Vec<&str> = vars.iter().map(|v| v["name"].as_str().unwrap()).collect();
        assert_eq!(
            names,
            [
                "mayAdminGranted",
                "mayAdminWildcardVerb",
                "mayAdminWildcardResource",
                "mayAdminWildcardGroup",
                "mayAdmin"
            ]
        );
        assert_eq!(
            vars[0]["expression"],
            "authorizer.group('gpu-admission.io').resource('adminaccess').check('use').allowed()"
        );
        assert!(
            vars[1]["expression"]
                .as_str()
                .unwrap()
                .contains(".check('only-a-wildcard-grants-this')")
        );
        assert!(
            vars[4]["expression"]
                .as_str()
                .unwrap()
                .contains("'system:masters' in request.userInfo.groups")
        );
    }
    let matched = claims["spec"]["matchConditions"][0]["expression"]
        .as_str()
        .unwrap();
    assert!(
        matched.contains("r.exactly.adminAccess == true"),
        "{matched}"
    );
    // Which classes are GPUs: by name (the catalog's, the policy's) or as the parameters list them.
    let vars = claims["spec"]["variables"].as_array().unwrap();
    let gpu = vars.iter().find(|v| v["name"] == "gpuAdmin").unwrap()["expression"]
        .as_str()
        .unwrap();
    assert!(gpu.contains("r.exactly.deviceClassName.endsWith('.gpu-admission.io')"));
    assert!(gpu.contains("'gpu.nvidia.com'"), "{gpu}");
    assert!(gpu.contains("variables.clusterGpu.contains("), "{gpu}");
    // Every scope lists its catalog DeviceClasses.
    let data = params(&p).unwrap();
    assert_eq!(
        data["tier.bronze.catalogDeviceClasses"],
        "\nl4-24gb.gpu-admission.io\n"
    );
}

/// No expression of the floor asks the authorizer more than once (one check costs about a third of the
/// apiserver's per-expression limit).
#[test]
fn every_authorizer_question_is_an_expression_of_its_own() {
    fn walk(v: &Value, asked: &mut usize) {
        match v {
            Value::String(s) => {
                assert!(s.matches("authorizer.").count() <= 1, "{s}");
                *asked += s.matches("authorizer.").count();
            }
            Value::Array(a) => a.iter().for_each(|x| walk(x, asked)),
            Value::Object(o) => o.values().for_each(|x| walk(x, asked)),
            _ => {}
        }
    }
    let p = policy(|t| t.to_string());
    let label = crate::names::DEFAULT_TIER_LABEL;
    let mut objects = render(&p, label).unwrap();
    objects.extend(render_placing(&p, label).unwrap());
    let mut asked = 0;
    objects.iter().for_each(|o| walk(o, &mut asked));
    // exempt (Pods, workloads, placing, admin claims), leaving and entering a tier, admin access (label,
    // claims): 4 each.
    assert_eq!(asked, 4 * 8);
}
