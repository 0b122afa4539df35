-- Personas and intent drift (EYT-style): metric views over the episode engine's views, for
-- the benchmark {{benchmark}} under the name prefix {{prefix}} (eyt for the built-in spec).
--
-- Words, one meaning each in every view below and in the report section (report.py):
--   completed: an episode whose status is 'completed' (failed ones are counted in the
--              report's Episodes table and left out here); distinct from
--   final-intent complete: the eyt_final judge's final_complete = 1 on the last turn (Y4);
--   unscored:  a verdict whose value is NULL (a failed call): left out and counted.
-- EYT has no asked / answered / refused reading: its turns are not classified by act.
--
-- Y1. A turn is an assistant turn of a completed episode (episode_verdicts: the selected
--     verdict set of each judge kind). An unscored verdict (value NULL) is left out of every
--     mean and counted, never a zero.
-- Y2. Latent-intent accuracy at model turn t = mean of eyt_latent.latent_match over turns t
--     (the warm-up curve, per target). The alpha band (report section argument) is computed
--     in Python from this curve (tasks/benchmarks/eyt/report.py warmup).
-- Y3. Intent drift at turn t = mean of eyt_drift.drift_latent (cosine distance between the
--     embeddings of the perceived and the latent intent) and of drift_step (between this
--     turn's and the previous turn's perceived intents; none on turn 1).
-- Y4. FICR (final-intent completion rate) = mean of eyt_final.final_complete over episodes
--     (judged on the last turn), per target and persona source (the item's
--     meta.persona_source: sample, nemotron, personamem), and per target over all sources
--     (persona_source 'all').
-- Y5. Subjective means = mean of eyt_subjective's empathy, persona_consistency and
--     anthropomorphism (1-5) over episodes, per target.
-- Y6. Per judge: with several judge models, each one's own value is stored as
--     <measure>#<k> (k = its place in the config's list); {{prefix}}_judge_scores averages
--     them per kind, measure, judge and target, the input of the ranking stability (Kendall's
--     tau between judges' rankings of the targets, report.py).
-- Y7. The persona budget: per persona source, the corpus personas among the run's items, how
--     many lost fields to the loader's persona_budget and how many fields in all (an item's
--     meta.persona_dropped: the whole fields left out of its persona text; the team's sample
--     records none and has no row here).

-- One row per assistant turn of a completed episode, with its measures.
CREATE OR REPLACE VIEW {{prefix}}_turns AS
SELECT episode_id, target, item_id,
       coalesce(json_extract_string(meta, '$.persona_source'), 'unknown') AS persona_source,
       model_turn, position,
       max(value) FILTER (WHERE kind = 'eyt_latent' AND measure = 'latent_match') AS latent_match,
       count(*) FILTER (WHERE kind = 'eyt_latent' AND measure = 'latent_match') AS n_latent_rows,
       max(value) FILTER (WHERE kind = 'eyt_drift' AND measure = 'drift_latent') AS drift_latent,
       max(value) FILTER (WHERE kind = 'eyt_drift' AND measure = 'drift_step') AS drift_step,
       max(value) FILTER (WHERE kind = 'eyt_final' AND measure = 'final_complete') AS final_complete,
       count(*) FILTER (WHERE kind = 'eyt_final' AND measure = 'final_complete') AS n_final_rows
FROM episode_verdicts
WHERE benchmark = '{{benchmark}}'
GROUP BY ALL;

-- Y2: the warm-up curve, per target and model turn.
CREATE OR REPLACE VIEW {{prefix}}_warmup AS
SELECT target, model_turn,
       count(*) FILTER (WHERE n_latent_rows > 0) AS n_turns,
       count(latent_match) AS n_scored,
       count(*) FILTER (WHERE n_latent_rows > 0 AND latent_match IS NULL) AS n_unscored,
       avg(latent_match) AS accuracy
FROM {{prefix}}_turns
GROUP BY ALL;

-- Y3: intent drift per target and model turn, and per target over all turns.
CREATE OR REPLACE VIEW {{prefix}}_drift AS
SELECT target, model_turn,
       count(drift_latent) AS n_latent, avg(drift_latent) AS drift_latent,
       count(drift_step) AS n_step, avg(drift_step) AS drift_step
FROM {{prefix}}_turns
GROUP BY ALL;

CREATE OR REPLACE VIEW {{prefix}}_drift_target AS
SELECT target,
       count(drift_latent) AS n_latent, avg(drift_latent) AS drift_latent,
       count(drift_step) AS n_step, avg(drift_step) AS drift_step
FROM {{prefix}}_turns
GROUP BY ALL;

-- Y4: FICR per target and persona source, and per target over all sources ('all').
CREATE OR REPLACE VIEW {{prefix}}_ficr AS
WITH fin AS (SELECT * FROM {{prefix}}_turns WHERE n_final_rows > 0)
SELECT target, persona_source,
       count(*) AS n_episodes, count(final_complete) AS n_scored,
       avg(final_complete) AS ficr
FROM fin GROUP BY ALL
UNION ALL
SELECT target, 'all' AS persona_source,
       count(*) AS n_episodes, count(final_complete) AS n_scored,
       avg(final_complete) AS ficr
FROM fin GROUP BY ALL;

-- Y5: subjective means per target (1-5).
CREATE OR REPLACE VIEW {{prefix}}_subjective AS
SELECT target,
       count(DISTINCT episode_id) AS n_episodes,
       count(value) FILTER (WHERE measure = 'empathy') AS n_scored,
       avg(value) FILTER (WHERE measure = 'empathy') AS empathy,
       avg(value) FILTER (WHERE measure = 'persona_consistency') AS persona_consistency,
       avg(value) FILTER (WHERE measure = 'anthropomorphism') AS anthropomorphism
FROM episode_verdicts
WHERE benchmark = '{{benchmark}}' AND kind = 'eyt_subjective'
  AND measure IN ('empathy', 'persona_consistency', 'anthropomorphism')
GROUP BY ALL;

-- Y6: each judge's own mean per kind, measure and target (panels only), with the judge's
-- model from the selected set's list (verdict_sets.judge: the models in config order).
CREATE OR REPLACE VIEW {{prefix}}_judge_scores AS
WITH per AS (
    SELECT kind, split_part(measure, '#', 1) AS measure,
           CAST(split_part(measure, '#', 2) AS INTEGER) AS judge_index,
           target, count(value) AS n_scored, avg(value) AS mean
    FROM episode_verdicts
    WHERE benchmark = '{{benchmark}}' AND kind LIKE 'eyt\_%' ESCAPE '\' AND measure LIKE '%#%'
    GROUP BY ALL
)
SELECT per.*,
       trim(list_extract(string_split(s.judge, ','), per.judge_index)) AS judge
FROM per
LEFT JOIN selected_verdict_sets s ON s.benchmark = '{{benchmark}}' AND s.kind = per.kind;

-- Y7: what the persona budget dropped, per persona source.
CREATE OR REPLACE VIEW {{prefix}}_persona_budget AS
WITH p AS (
    SELECT json_extract_string(meta, '$.persona_source') AS persona_source,
           json_extract_string(meta, '$.persona_id') AS persona_id,
           max(CAST(json_extract(meta, '$.persona_dropped') AS INTEGER)) AS dropped
    FROM bench_items
    WHERE benchmark = '{{benchmark}}' AND json_extract(meta, '$.persona_dropped') IS NOT NULL
    GROUP BY ALL
)
SELECT persona_source, count(*) AS n_personas, count(*) FILTER (WHERE dropped > 0) AS n_trimmed,
       sum(dropped) AS n_fields_dropped
FROM p GROUP BY ALL;
