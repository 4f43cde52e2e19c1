//! burn-train's checkpointer under `PipelineStrategy`: full-model records of the merged model,
//! and a run resumed from one.

use std::path::Path;

use burn::module::Module;
use burn::optim::AdamConfig;
use burn::train::Learner;
use burn::train::checkpoint::{Checkpointer, FileCheckpointer, KeepLastNCheckpoints};
use pipetrain::learner::PipelineStrategy;

use crate::example::{self, Mlp};
use crate::{common, launch, rel_diff};

#[test]
fn burns_checkpointer_saves_the_merged_model_and_a_resumed_run_ends_where_the_whole_run_does() {
    let model = common::seeded(example::SEED, |device| Mlp::new(&device.clone().autodiff()));
    let dir = common::scratch("learner-checkpoint");
    let training = || {
        example::training(dir.path(), true)
            .with_default_checkpointers()
            .with_checkpointing_strategy(KeepLastNCheckpoints::new(example::EPOCHS))
    };
    let (whole, _) = launch(training(), example::learner(model.clone()));
    assert!(whole.error.is_none(), "{:?}", whole.error);

    // Each epoch's model record is the whole trained model: the last one is the result.
    let models = FileCheckpointer::new(dir.path().join("checkpoint"), "model");
    let record = models
        .restore(example::EPOCHS)
        .expect("the last epoch's model");
    let saved = model.clone().load_record(record);
    assert_eq!(example::weights(&saved), example::weights(&whole.model));
    let record = models.restore(1).expect("the first epoch's model");
    let first = model.clone().load_record(record);
    assert_ne!(example::weights(&first), example::weights(&whole.model));

    // Resumed after epoch 2 (burn loads the model before the strategy starts): plain SGD has no
    // optimizer state, so the last epoch ends on the whole run's weights.
    let resumed = training().checkpoint(example::EPOCHS - 1);
    let (resumed, _) = launch(resumed, example::learner(model.clone()));
    assert!(resumed.error.is_none(), "{:?}", resumed.error);
    let difference = rel_diff(&resumed.model, &whole.model);
    assert!(
        difference <= common::TOLERANCE,
        "resumed vs whole run: {difference:?}"
    );
}

#[test]
fn with_the_pipelines_optimizer_state_an_adam_run_resumes_exactly() {
    let model = common::seeded(example::SEED, |device| Mlp::new(&device.clone().autodiff()));
    let learner = || Learner::new(model.clone(), AdamConfig::new().init(), 0.01);
    let (whole_dir, dir) = (
        common::scratch("learner-whole"),
        common::scratch("learner-resume"),
    );
    let state = dir.path().join("pipeline");
    let training = |dir: &Path, state: Option<&Path>| {
        let mut strategy = PipelineStrategy::new(AdamConfig::new())
            .stages(2)
            .replicas(2)
            .micro_batches(4);
        if let Some(state) = state {
            strategy = strategy.optimizer_state_dir(state);
        }
        example::training(dir, false)
            .with_training_strategy(strategy.into())
            .with_default_checkpointers()
            .with_checkpointing_strategy(KeepLastNCheckpoints::new(example::EPOCHS))
    };
    let (whole, _) = launch(training(whole_dir.path(), None), learner());
    let first = training(dir.path(), Some(&state)).num_epochs(example::EPOCHS - 1);
    let (first, _) = launch(first, learner());
    assert!(whole.error.is_none() && first.error.is_none());
    assert!(state.join("pipeline-2.safetensors").exists());

    let resume = |state: Option<&Path>| {
        let training = training(dir.path(), state).checkpoint(example::EPOCHS - 1);
        let (resumed, _) = launch(training, learner());
        assert!(resumed.error.is_none(), "{:?}", resumed.error);
        rel_diff(&resumed.model, &whole.model)
    };
    let exact = resume(Some(&state));
    assert!(
        exact <= common::TOLERANCE,
        "resumed with Adam's state: {exact:e}"
    );
    // burn's checkpoint alone restarts Adam's moments: the last epoch ends elsewhere.
    let restarted = resume(None);
    assert!(
        restarted > 1e-3,
        "resumed without Adam's state: {restarted:e}"
    );

    // Resuming from an epoch whose pipeline state is missing is an error naming the file.
    std::fs::remove_file(state.join("pipeline-2.safetensors")).unwrap();
    let training = training(dir.path(), Some(&state)).checkpoint(example::EPOCHS - 1);
    let (failed, _) = launch(training, learner());
    let error = failed
        .error
        .expect("the missing state is an error")
        .to_string();
    assert!(error.contains("pipeline-2.safetensors"), "{error}");
}
