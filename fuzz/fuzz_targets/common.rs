//! The real scorer in process on its embedded default policy, and the policy as the frontend sees it.
use std::sync::{Arc, OnceLock};

use gpu_admission_proto::scorer::v1::{ScoreRequest, ScoreResponse};
use scorer::metrics::Metrics;
use scorer::model::Learned;
use scorer::policy::{embedded_default, watch::PolicyStore};
use scorer::service::Core;
use gpu_admission_core::policy::PolicySnapshot;

pub fn scorer() -> &'static (Core, PolicySnapshot) {
    static SCORER: OnceLock<(Core, PolicySnapshot)> = OnceLock::new();
    SCORER.get_or_init(|| {
        let store = Arc::new(PolicyStore::new(Some(embedded_default().unwrap())));
        let core = Core::new(store, Learned::default(), Arc::new(Metrics::unregistered()));
        let policy = PolicySnapshot::from_response(core.get_policy().unwrap());
        (core, policy)
    })
}

/// `Explain`: the answer `Score` would give, with nothing learned and no budget spent (deterministic).
#[allow(dead_code)]
pub fn explain(core: &Core, req: &ScoreRequest) -> Result<ScoreResponse, String> {
    core.explain(req)
        .map(|e| e.answer.unwrap_or_default())
        .map_err(|s| format!("{:?}: {}", s.code(), s.message()))
}
