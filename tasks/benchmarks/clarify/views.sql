-- Clarify or answer: metric views over the episode engine's views, for the benchmark
-- {{benchmark}} (its spec's name) under the name prefix {{prefix}} (the spec's views.prefix:
-- clarify for the built-in spec, so clarify_summary, clarify_rates, ...)
-- (views_engine.sql: episode_verdicts keeps completed episodes and the selected verdict sets).
--
-- Words, one meaning each in every view below and in the report section (section.py):
--   completed: an episode whose status is 'completed' (failed ones are counted in the
--              report's Episodes table and left out here);
--   asked:     the first act is clarifying_question;
--   answered:  the first act is direct_answer or hedge (answer_without_asking_rate);
--   refused:   the first act is refusal (refusal_rate): neither asked nor answered;
--   did not ask first: answered or refused (the accuracy path 'answered_directly', C6);
--   unscored:  the act verdict failed: left out and counted.
--
-- C1. An item is ambiguous when its meta says "ambiguous": true (the loader's req_clari).
-- C2. The *first act* of an episode is the act judge's label of its first assistant turn
--     (model_turn 1). An unscored act (NULL label) leaves the episode out of the rates and
--     of the accuracy paths; it is counted (n_act_unscored).
-- C3. Clarification rate = first act clarifying_question / episodes with a first act.
--     Under-clarification (ambiguous items, condition ask) = first act direct_answer or
--     hedge (answered without asking) / episodes with a first act; refusals are their own
--     rate. Over-clarification = the clarification rate on unambiguous items (condition ask).
-- C4. On-target rate = mean on_target over first turns that asked on an ambiguous item
--     (unscored on_target left out, counted).
-- C5. The *final answer* is the episode's last assistant turn (episode_turns). Its measures
--     are the reference judge's exact_match, token_f1 and contains, and equivalence's
--     equivalent when that judge ran; each mean leaves out unscored rows and counts them.
-- C6. Accuracy paths: answered_directly (condition ask, first act not a clarifying question:
--     a refusal or hedge is scored as what its text earns); after_asking (condition ask,
--     first act clarifying_question: the answer after the simulated user's reply);
--     after_on_target (after_asking with on_target = 1: the question asked targeted the
--     actual ambiguity); disambiguated (condition disambiguated: intent stated up front).
--     after_on_target is a subset of after_asking: rows overlap by design.
-- C7. The gap the study reports: accuracy after an on-target clarification minus accuracy on
--     the disambiguated question, per target (clarify_summary.gap_*, ambiguous items only).
-- C8. Conditions are found by the prompt they open with, as the spec says (bench_conditions):
--     "ask" is the condition opening with the question as written (prompt question),
--     "disambiguated" the one opening with the disambiguated question; a spec may name them
--     as it likes.

-- One row per completed clarify episode: its first act and its final answer's measures.
CREATE OR REPLACE VIEW {{prefix}}_episodes AS
WITH ep AS (
    SELECT e.episode_id, e.target, e.condition, e.item_id,
           coalesce(TRY_CAST(json_extract(i.meta, '$.ambiguous') AS BOOLEAN), false) AS ambiguous
    FROM episodes e
    JOIN bench_items i ON i.benchmark = e.benchmark AND i.item_id = e.item_id
    WHERE e.benchmark = '{{benchmark}}' AND e.status = 'completed'
),
v AS (SELECT * FROM episode_verdicts WHERE benchmark = '{{benchmark}}'),
last_turn AS (
    SELECT episode_id, max(position) AS final_position
    FROM episode_turns WHERE role = 'assistant' GROUP BY episode_id
),
first_turn AS (
    SELECT episode_id,
           max(label) FILTER (WHERE kind = 'act' AND measure = 'act') AS first_act,
           count(*) FILTER (WHERE kind = 'act' AND measure = 'act') AS n_first_act_rows,
           max(value) FILTER (WHERE kind = 'act' AND measure = 'on_target') AS on_target
    FROM v WHERE model_turn = 1 GROUP BY episode_id
),
final_turn AS (
    SELECT v.episode_id,
           max(v.label) FILTER (WHERE kind = 'act' AND measure = 'act') AS final_act,
           max(value) FILTER (WHERE kind = 'reference' AND measure = 'exact_match') AS exact_match,
           max(value) FILTER (WHERE kind = 'reference' AND measure = 'token_f1') AS token_f1,
           max(value) FILTER (WHERE kind = 'reference' AND measure = 'contains') AS contains,
           max(value) FILTER (WHERE kind = 'equivalence' AND measure = 'equivalent') AS equivalent,
           count(*) FILTER (WHERE kind = 'reference' AND measure = 'exact_match') AS n_ref_rows,
           count(*) FILTER (WHERE kind = 'equivalence' AND measure = 'equivalent') AS n_equiv_rows
    FROM v JOIN last_turn lt ON lt.episode_id = v.episode_id AND v.position = lt.final_position
    GROUP BY v.episode_id
)
SELECT ep.*, lt.final_position, f.first_act, f.on_target, t.final_act,
       t.exact_match, t.token_f1, t.contains, t.equivalent,
       coalesce(t.n_ref_rows, 0) AS n_ref_rows, coalesce(t.n_equiv_rows, 0) AS n_equiv_rows,
       CASE WHEN ep.condition IN (SELECT condition FROM bench_conditions
                                  WHERE benchmark = '{{benchmark}}' AND prompt = 'disambiguated')
            THEN 'disambiguated'
            WHEN f.first_act IS NULL THEN NULL
            WHEN f.first_act = 'clarifying_question' THEN 'after_asking'
            ELSE 'answered_directly' END AS path
FROM ep
LEFT JOIN last_turn lt USING (episode_id)
LEFT JOIN first_turn f USING (episode_id)
LEFT JOIN final_turn t USING (episode_id);

-- Per target, condition and ambiguity: the first act's distribution (C2-C4).
CREATE OR REPLACE VIEW {{prefix}}_rates AS
SELECT target, condition, ambiguous,
       count(*) AS n_episodes,
       count(*) FILTER (WHERE first_act IS NULL) AS n_act_unscored,
       count(first_act) AS n_judged,
       count(*) FILTER (WHERE first_act = 'clarifying_question') AS n_asked,
       count(*) FILTER (WHERE first_act = 'direct_answer') AS n_direct,
       count(*) FILTER (WHERE first_act = 'hedge') AS n_hedge,
       count(*) FILTER (WHERE first_act = 'refusal') AS n_refusal,
       count(*) FILTER (WHERE first_act = 'clarifying_question') / nullif(count(first_act), 0)
           AS clarify_rate,
       count(*) FILTER (WHERE first_act IN ('direct_answer', 'hedge')) / nullif(count(first_act), 0)
           AS answer_without_asking_rate,
       count(*) FILTER (WHERE first_act = 'refusal') / nullif(count(first_act), 0) AS refusal_rate,
       count(on_target) FILTER (WHERE first_act = 'clarifying_question' AND ambiguous)
           AS n_on_target_judged,
       count(*) FILTER (WHERE first_act = 'clarifying_question' AND ambiguous AND on_target IS NULL)
           AS n_on_target_unscored,
       avg(on_target) FILTER (WHERE first_act = 'clarifying_question' AND ambiguous)
           AS on_target_rate
FROM {{prefix}}_episodes
GROUP BY ALL;

-- Per target, ambiguity and path (C5, C6): the final answer's accuracy.
CREATE OR REPLACE VIEW {{prefix}}_accuracy AS
WITH paths AS (
    SELECT *, path AS acc_path FROM {{prefix}}_episodes WHERE path IS NOT NULL
    UNION ALL
    SELECT *, 'after_on_target' AS acc_path FROM {{prefix}}_episodes
    WHERE path = 'after_asking' AND on_target = 1
)
SELECT target, ambiguous, acc_path AS path,
       count(*) AS n_episodes,
       count(exact_match) AS n_scored,
       count(*) FILTER (WHERE n_ref_rows > 0 AND exact_match IS NULL) AS n_unscored,
       avg(exact_match) AS exact_match,
       avg(token_f1) AS token_f1,
       avg(contains) AS contains,
       count(equivalent) AS n_equiv_scored,
       count(*) FILTER (WHERE n_equiv_rows > 0 AND equivalent IS NULL) AS n_equiv_unscored,
       avg(equivalent) AS equivalent
FROM paths
GROUP BY ALL;

-- Per target: the headline numbers (C3, C4, C7).
CREATE OR REPLACE VIEW {{prefix}}_summary AS
WITH t AS (SELECT DISTINCT target FROM {{prefix}}_episodes),
ask AS (SELECT condition FROM bench_conditions WHERE benchmark = '{{benchmark}}' AND prompt = 'question'),
amb AS (SELECT * FROM {{prefix}}_rates WHERE condition IN (SELECT condition FROM ask) AND ambiguous),
una AS (SELECT * FROM {{prefix}}_rates WHERE condition IN (SELECT condition FROM ask) AND NOT ambiguous),
acc AS (SELECT * FROM {{prefix}}_accuracy WHERE ambiguous)
SELECT t.target,
       amb.clarify_rate AS clarify_rate_ambiguous,
       una.clarify_rate AS clarify_rate_unambiguous,
       amb.answer_without_asking_rate AS under_clarification,
       una.clarify_rate AS over_clarification,
       amb.on_target_rate,
       coalesce(amb.n_act_unscored, 0) + coalesce(una.n_act_unscored, 0) AS n_act_unscored,
       ot.contains - dis.contains AS gap_contains,
       ot.token_f1 - dis.token_f1 AS gap_token_f1,
       ot.equivalent - dis.equivalent AS gap_equivalent
FROM t
LEFT JOIN amb USING (target)
LEFT JOIN una USING (target)
LEFT JOIN acc ot ON ot.target = t.target AND ot.path = 'after_on_target'
LEFT JOIN acc dis ON dis.target = t.target AND dis.path = 'disambiguated';
