//! The real scorer in process on its embedded default policy, and the policy as the frontend sees it.
use std::sync::{Arc, OnceLock};

use gpu_admission_proto::scorer::v1::{ScoreRequest, ScoreResponse};
use scorer::model::Learned;
use scorer::policy::embedded_default;
use scorer::service::Core;
use gpu_admission_core::policy::PolicySnapshot;

pub fn scorer() -> &'static (Core, PolicySnapshot) {
    static SCORER: OnceLock<(Core, PolicySnapshot)> = OnceLock::new();
    SCORER.get_or_init(|| {
        let policy = embedded_default().unwrap();
        let core = Core::in_process(policy.clone(), Learned::default());
        let policy = PolicySnapshot::from_policy(Arc::new(policy));
        (core, policy)
    })
}

/// `Explain`: the answer `Score` would give, with nothing learned and no budget spent (deterministic).
#[allow(dead_code)]
pub fn explain(core: &Core, req: &ScoreRequest) -> Result<ScoreResponse, String> {
    core.explain(req)
        .map(|e| e.answer.unwrap_or_default())
        .map_err(|refusal| refusal.to_string())
}
