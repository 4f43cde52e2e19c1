//! A doctor run: the findings, the sweep with its heartbeat, the speed check ([`run`]), and
//! what it found ([`DoctorReport`]).

use super::cases::{SECTIONS, Scope};
use super::heartbeat::beating;
use super::libraries::{Finding, findings};
use super::progress::{Event, Progress};
use super::settings::DoctorSettings;
use super::table::{Case, Table, render};
use crate::CommandError;
use crate::error::{Error, Result};

/// What a doctor run found.
#[derive(Clone, Debug)]
pub struct DoctorReport {
    /// The device's name, as the settings gave it.
    pub on: String,
    /// The libraries and cache looked for.
    pub findings: Vec<Finding>,
    /// Every case's verdict, in the order they ended.
    pub cases: Vec<Case>,
}

impl DoctorReport {
    /// The cases that failed.
    pub fn failed(&self) -> impl Iterator<Item = &Case> {
        self.cases.iter().filter(|c| !c.ok)
    }

    /// Whether every case passed (and there was at least one).
    pub fn passed(&self) -> bool {
        !self.cases.is_empty() && self.failed().next().is_none()
    }

    /// The final table: one line per case, then the count passed and failed.
    pub fn render(&self) -> String {
        render(&self.cases, &self.on)
    }
}

/// The names of the sweep's sections, in the order they run.
pub fn section_names() -> Vec<&'static str> {
    SECTIONS.iter().map(|(name, _)| *name).collect()
}

/// Runs the doctor `settings` describe: tells `sink` what it found, each section as it starts,
/// each case as it ends and a heartbeat every `settings.heartbeat` while a case runs; then the
/// speed check if asked. Every case is bounded (a few steps of a small model), so the run ends.
///
/// # Errors
/// [`CommandError::DoctorNoSection`] for a section name that is none of
/// [`section_names`] (before anything runs); [`CommandError::DoctorScratch`] when the scratch
/// folder cannot be made.
pub fn run(settings: &DoctorSettings, sink: &(dyn Fn(Event) + Sync)) -> Result<DoctorReport> {
    let chosen: Vec<&'static str> = match &settings.sections {
        None => section_names(),
        Some(wanted) => wanted
            .iter()
            .map(|w| {
                section_names()
                    .into_iter()
                    .find(|name| name == w)
                    .ok_or_else(|| {
                        Error::Command(CommandError::DoctorNoSection {
                            name: w.clone(),
                            sections: section_names(),
                        })
                    })
            })
            .collect::<Result<_>>()?,
    };
    std::fs::create_dir_all(&settings.scratch).map_err(|e| {
        Error::Command(CommandError::DoctorScratch {
            path: settings.scratch.clone(),
            reason: e.to_string(),
        })
    })?;
    let progress = Progress::new(sink);
    let found = findings(
        &settings.device,
        &settings.library_path,
        settings.cache.as_deref(),
    );
    for finding in &found {
        progress.tell(Event::Found(finding.clone()));
    }
    let scope = Scope {
        device: settings.device.clone(),
        quick: settings.quick,
        precision: settings.precision,
        scratch: settings.scratch.clone(),
        progress: &progress,
    };
    let cases = beating(&progress, settings.heartbeat, || {
        let mut table = Table::new(&progress, settings.perturb.as_deref());
        for (name, section) in SECTIONS {
            if chosen.contains(&name) {
                progress.section(name);
                section(&mut table, &scope);
            }
        }
        table.into_cases()
    });
    let _ = std::fs::remove_dir_all(&settings.scratch);
    if let Some(check) = &settings.speed {
        super::speed::speed(&settings.device, check, &|line| {
            progress.tell(Event::Speed(line))
        });
    }
    Ok(DoctorReport {
        on: settings.name.clone(),
        findings: found,
        cases,
    })
}
