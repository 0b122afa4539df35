-- The episode engine's views (the sister benchmarks). Each benchmark's own metrics live in
-- views_<benchmark>.sql and read these.
--
-- E1. Of each (benchmark, judge kind), the most recently created verdict set is the one the
--     metrics read (another judge or template makes a new set; the old one stays queryable).
--     A set whose id hashes the versions of the items it judged (item_version set: Ben-Util
--     against versioned checklists, CarryOnBench's) differs per shard and per checklist, so
--     it is chosen per item, not per benchmark: the views of its benchmark choose it
--     (CarryOnBench's R1), and these generic views leave it out.
-- E2. Only completed episodes are scored; the others are counted in episode_coverage.
-- E3. An unscored verdict (value NULL) is left out of every mean, never counted as zero.

CREATE OR REPLACE VIEW selected_verdict_sets AS
SELECT * FROM verdict_sets
WHERE item_version IS NULL
QUALIFY row_number() OVER (PARTITION BY benchmark, kind
                           ORDER BY created DESC, judgment_set_id DESC) = 1;

-- One row per measure of an assistant turn of a completed episode, with the episode's
-- item, condition and target and the item's meta (JSON) for grouping.
CREATE OR REPLACE VIEW episode_verdicts AS
SELECT e.benchmark, e.episode_id, e.item_id, e.condition, e.target, e.termination,
       v.position, v.model_turn, v.kind, v.measure, v.value, v.label, v.reason,
       i.meta
FROM verdicts v
JOIN selected_verdict_sets s USING (judgment_set_id)
JOIN episodes e USING (episode_id)
JOIN bench_items i ON i.benchmark = e.benchmark AND i.item_id = e.item_id
WHERE e.status = 'completed' AND s.benchmark = e.benchmark;

-- Per benchmark, target and condition: episodes by status and termination reason.
CREATE OR REPLACE VIEW episode_coverage AS
SELECT benchmark, target, condition,
       count(*) AS n_episodes,
       count(*) FILTER (WHERE status = 'completed') AS n_completed,
       count(*) FILTER (WHERE status <> 'completed') AS n_failed,
       count(*) FILTER (WHERE termination = 'turn_cap') AS n_turn_cap,
       count(*) FILTER (WHERE termination = 'answered') AS n_answered,
       count(*) FILTER (WHERE termination = 'user_stop') AS n_user_stop,
       count(*) FILTER (WHERE termination = 'single_turn') AS n_single_turn
FROM episodes
GROUP BY ALL;
