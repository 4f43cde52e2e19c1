//! A burn-train renderer that records the numeric metric values that reach it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use burn::train::logger::{EvaluationProgressLogger, TrainingProgressLogger};
use burn::train::metric::{MetricDefinition, MetricId};
use burn::train::renderer::{
    EvaluationName, MetricState, MetricsRenderer, MetricsRendererEvaluation,
    MetricsRendererTraining,
};

/// Every numeric value a renderer was given, by split ("train", "valid") and metric name.
pub type Seen = Arc<Mutex<HashMap<(String, String), Vec<f64>>>>;

/// A renderer that records what reaches it.
#[derive(Default)]
pub struct Recorder {
    names: HashMap<MetricId, String>,
    pub seen: Seen,
}

impl Recorder {
    fn record(&mut self, split: &str, state: MetricState) {
        if let MetricState::Numeric(entry, Some(value)) = state {
            let name = self
                .names
                .get(&entry.metric_id)
                .cloned()
                .unwrap_or_default();
            let mut seen = self.seen.lock().unwrap();
            let values = seen.entry((split.to_string(), name)).or_default();
            values.push(value.current());
        }
    }
}

impl MetricsRendererTraining for Recorder {
    fn update_train(&mut self, state: MetricState) {
        self.record("train", state);
    }
    fn update_valid(&mut self, state: MetricState) {
        self.record("valid", state);
    }
}

impl MetricsRendererEvaluation for Recorder {
    fn update_test(&mut self, _name: EvaluationName, _state: MetricState) {}
}

impl TrainingProgressLogger for Recorder {
    fn start(&mut self, _: usize, _: usize, _: Option<usize>, _: Option<&str>) {}
    fn update_epoch(&mut self, _: usize) {}
    fn start_split(&mut self, _: &str, _: usize) {}
    fn update_split(&mut self, _: usize) {}
    fn end_split(&mut self) {}
    fn end(&mut self) {}
    fn log_event_training(&mut self, _: String) {}
}

impl EvaluationProgressLogger for Recorder {
    fn start_global_progress(&mut self, _: usize) {}
    fn start_test(&mut self, _: &str, _: usize) {}
    fn update_test_progress(&mut self, _: usize) {}
    fn end_test(&mut self) {}
    fn end_global_progress(&mut self) {}
    fn log_event_evaluation(&mut self, _: String) {}
}

impl MetricsRenderer for Recorder {
    fn manual_close(&mut self) {}
    fn register_metric(&mut self, definition: MetricDefinition) {
        self.names
            .insert(definition.metric_id, definition.name.to_string());
    }
}
