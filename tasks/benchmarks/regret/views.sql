-- Clarification as a policy (RegretBench style): metric views for the benchmark {{benchmark}}
-- under the prefix {{prefix}} (views_engine.sql: episode_verdicts keeps completed episodes and
-- each judge kind's latest verdict set).
--
-- Words, one meaning each in every view below and in the report section (report.py):
--   completed: an episode whose status is 'completed' (failed ones are counted in the
--              report's Episodes table, and a target with none completed is listed there);
--   asked:     a turn the act judge labels clarifying_question (a *question*, G2);
--   answered:  the episode's last assistant turn is any other act (direct_answer, hedge or
--              refusal: for a policy that must commit to an intent, a refusal is an answer
--              naming none, so it is scored by its aliases like any answer, G2, G6);
--   unscored:  an act, facet or alias verdict that failed: the episode is left out, counted.
--
-- G1. An item is (graph, hidden intent, user behaviour); its hidden JSON carries the graph's
--     intents, hidden_index and the rules (utility U, turn_cost c, ineffective_cost lambda);
--     its meta the domain ('unspecified' when the source names none), behaviour and cig_id.
-- G2. A turn's act is the act judge's label. A *question* is act clarifying_question; the
--     episode's final turn is its last assistant turn; it *answered* when that turn's act is
--     any other act (a capped episode whose last turn is a question did not answer).
-- G3. The regret judge's `admitted` mask (bit i = intent i) says which intents the user's
--     reply leaves possible; turns without a reply admit every intent. The consistent set
--     before a turn is the AND of the earlier turns' masks (all intents at the start); after
--     it, that AND this turn's mask. The belief is uniform over the consistent set
--     (p_hidden_after: the belief on the hidden intent; NULL when contradictions emptied it).
-- G4. A replied question is *ineffective* when its facet is UNSUPPORTED, repeats a facet asked
--     earlier in the episode, or leaves the consistent set unchanged (first reason named).
--     The ineffective rate = ineffective / replied questions.
-- G5. Too early: the final turn answered while 2 or more intents were consistent before it.
--     Too late: some question was asked while at most one intent was consistent.
-- G6. Correct: the final turn answered and its alias match is 1 (correct_by 'alias'); or the
--     alias match found no alias (label no_match, not 'competing') and the optional
--     equivalence judge says equivalent (correct_by 'equivalence', recorded as such).
-- G7. turns = the episode's assistant turns (the answer included); tokens = the sum over
--     them of ceil(characters / 4), one estimate for every seat (the planner has no
--     tokenizer). Reward R = U*correct - c*turns - lambda*ineffective.
-- G8. r_ref = the reference planner's reward on the same item (its episode simulated against
--     the same user, tasks/benchmarks/regret/cig.py); regret = r_ref - R; r_ref_expected = its mean over the
--     graph's intents. An episode whose act, facet or alias verdicts are unscored (a failed
--     call) is left out of every mean and counted (n_unscored, unscored_reason).

CREATE OR REPLACE VIEW {{prefix}}_turns AS
WITH ep AS (
    SELECT e.episode_id, e.target, e.item_id,
           json_extract_string(i.meta, '$.cig_id') AS cig_id,
           coalesce(json_extract_string(i.meta, '$.domain'), 'unspecified') AS domain,
           json_extract_string(i.meta, '$.behaviour') AS behaviour,
           CAST(json_extract(i.hidden, '$.hidden_index') AS INTEGER) AS hidden_index,
           CAST(json_array_length(i.hidden, '$.intents') AS INTEGER) AS n_intents
    FROM episodes e
    JOIN bench_items i ON i.benchmark = e.benchmark AND i.item_id = e.item_id
    WHERE e.benchmark = '{{benchmark}}' AND e.status = 'completed'
),
m AS (
    SELECT episode_id, position,
           count(*) FILTER (WHERE kind = 'act' AND measure = 'act') AS n_act_rows,
           max(label) FILTER (WHERE kind = 'act' AND measure = 'act') AS act,
           max(label) FILTER (WHERE kind = 'regret' AND measure = 'facet'
                              AND value IS NOT NULL) AS facet,
           count(*) FILTER (WHERE kind = 'regret' AND measure = 'facet' AND value IS NULL
                            AND label IS NULL) AS n_facet_unscored,
           max(value) FILTER (WHERE kind = 'regret' AND measure = 'admitted') AS admitted,
           max(value) FILTER (WHERE kind = 'regret' AND measure = 'alias_correct') AS alias_correct,
           max(label) FILTER (WHERE kind = 'regret' AND measure = 'alias_correct') AS alias_label,
           max(value) FILTER (WHERE kind = 'regret' AND measure = 'r_ref') AS r_ref,
           max(value) FILTER (WHERE kind = 'regret' AND measure = 'r_ref_expected') AS r_ref_expected,
           max(value) FILTER (WHERE kind = 'equivalence' AND measure = 'equivalent') AS equivalent
    FROM episode_verdicts WHERE benchmark = '{{benchmark}}'
    GROUP BY episode_id, position
),
base AS (
    SELECT ep.*, t.position, t.model_turn, length(coalesce(t.content, '')) AS chars,
           coalesce(m.n_act_rows, 0) AS n_act_rows, m.act, m.facet,
           coalesce(m.n_facet_unscored, 0) AS n_facet_unscored,
           m.alias_correct, m.alias_label, m.r_ref, m.r_ref_expected, m.equivalent,
           (1::UBIGINT << ep.n_intents) - 1 AS full_mask,
           coalesce(CAST(m.admitted AS UBIGINT), (1::UBIGINT << ep.n_intents) - 1) AS admitted,
           t.position = max(t.position) OVER (PARTITION BY t.episode_id) AS is_last
    FROM ep
    JOIN episode_turns t ON t.episode_id = ep.episode_id AND t.role = 'assistant'
    LEFT JOIN m ON m.episode_id = t.episode_id AND m.position = t.position
),
run AS (
    SELECT *,
           coalesce(bit_and(admitted) OVER w, full_mask) AS consistent_before,
           CASE WHEN facet IS NOT NULL AND facet <> 'UNSUPPORTED'
                THEN count(*) OVER (PARTITION BY episode_id, facet ORDER BY position
                                    ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) > 0
                ELSE false END AS repeated
    FROM base
    WINDOW w AS (PARTITION BY episode_id ORDER BY position
                 ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
)
SELECT episode_id, target, item_id, cig_id, domain, behaviour, hidden_index, n_intents,
       position, model_turn, is_last, chars, act, n_act_rows, facet, n_facet_unscored,
       alias_correct, alias_label, r_ref, r_ref_expected, equivalent, admitted,
       consistent_before, consistent_before & admitted AS consistent_after,
       bit_count(consistent_before) AS n_consistent_before,
       bit_count(consistent_before & admitted) AS n_consistent_after,
       CASE WHEN bit_count(consistent_before & admitted) = 0 THEN NULL
            ELSE CAST(((consistent_before & admitted) >> hidden_index) & 1 AS DOUBLE)
                 / bit_count(consistent_before & admitted) END AS p_hidden_after,
       act = 'clarifying_question' AS is_question,
       facet IS NOT NULL AS replied,
       repeated,
       CASE WHEN facet IS NULL THEN NULL
            WHEN facet = 'UNSUPPORTED' THEN 'unsupported'
            WHEN repeated THEN 'repeated'
            WHEN (consistent_before & admitted) = consistent_before THEN 'unchanged'
            END AS ineffective_reason,
       coalesce(act = 'clarifying_question' AND bit_count(consistent_before) <= 1, false)
           AS too_late
FROM run;

-- One row per completed episode: its cost, its answer and its reward (G5-G8).
CREATE OR REPLACE VIEW {{prefix}}_episodes AS
WITH per AS (
    SELECT episode_id, target, item_id, cig_id, domain, behaviour, hidden_index,
           count(*) AS turns,
           sum(ceil(chars / 4.0)) AS tokens,
           count(*) FILTER (WHERE is_question) AS n_questions,
           count(*) FILTER (WHERE replied) AS n_replied,
           count(*) FILTER (WHERE ineffective_reason IS NOT NULL) AS n_ineffective,
           bool_or(too_late) AS too_late,
           count(*) FILTER (WHERE n_act_rows > 0 AND act IS NULL) AS n_act_unscored,
           sum(n_facet_unscored) AS n_facet_unscored,
           max(act) FILTER (WHERE is_last) AS final_act,
           max(n_consistent_before) FILTER (WHERE is_last) AS final_n_consistent,
           max(alias_correct) FILTER (WHERE is_last) AS alias_correct,
           max(alias_label) FILTER (WHERE is_last) AS alias_label,
           max(equivalent) FILTER (WHERE is_last) AS equivalent,
           max(r_ref) FILTER (WHERE is_last) AS r_ref,
           max(r_ref_expected) FILTER (WHERE is_last) AS r_ref_expected
    FROM {{prefix}}_turns
    GROUP BY ALL
),
scored AS (
    SELECT p.*,
           CASE WHEN n_act_unscored > 0 THEN 'act unscored'
                WHEN n_facet_unscored > 0 THEN 'facet unscored'
                WHEN final_act IS NULL THEN 'no act verdict'
                WHEN alias_correct IS NULL OR r_ref IS NULL THEN 'no regret verdict'
                END AS unscored_reason,
           final_act IS NOT NULL AND final_act <> 'clarifying_question' AS answered,
           CAST(json_extract(i.hidden, '$.rules.utility') AS DOUBLE) AS utility,
           CAST(json_extract(i.hidden, '$.rules.turn_cost') AS DOUBLE) AS turn_cost,
           CAST(json_extract(i.hidden, '$.rules.ineffective_cost') AS DOUBLE) AS ineffective_cost
    FROM per p
    JOIN bench_items i ON i.benchmark = '{{benchmark}}' AND i.item_id = p.item_id
),
judged AS (
    SELECT *,
           CASE WHEN unscored_reason IS NOT NULL OR NOT answered THEN NULL
                WHEN alias_correct = 1 THEN 'alias'
                WHEN alias_label = 'no_match' AND equivalent = 1 THEN 'equivalence'
                END AS correct_by
    FROM scored
)
SELECT episode_id, target, item_id, cig_id, domain, behaviour, hidden_index, turns, tokens,
       n_questions, n_replied, n_ineffective, answered, final_act, final_n_consistent,
       alias_label, equivalent, correct_by, unscored_reason,
       unscored_reason IS NULL AS scored,
       CASE WHEN unscored_reason IS NULL THEN CAST(correct_by IS NOT NULL AS DOUBLE) END AS correct,
       CASE WHEN unscored_reason IS NULL THEN answered AND final_n_consistent >= 2 END AS too_early,
       CASE WHEN unscored_reason IS NULL THEN too_late END AS too_late,
       utility, turn_cost, ineffective_cost,
       CASE WHEN unscored_reason IS NULL THEN
            utility * CAST(correct_by IS NOT NULL AS DOUBLE) - turn_cost * turns
            - ineffective_cost * n_ineffective END AS reward,
       r_ref, r_ref_expected,
       CASE WHEN unscored_reason IS NULL THEN
            r_ref - (utility * CAST(correct_by IS NOT NULL AS DOUBLE) - turn_cost * turns
                     - ineffective_cost * n_ineffective) END AS regret
FROM judged;

-- Per target, user behaviour and domain (scored episodes; unscored ones counted).
CREATE OR REPLACE VIEW {{prefix}}_summary AS
SELECT target, behaviour, domain,
       count(*) AS n_episodes,
       count(*) FILTER (WHERE scored) AS n_scored,
       count(*) FILTER (WHERE NOT scored) AS n_unscored,
       avg(correct) AS success,
       avg(turns) FILTER (WHERE scored) AS turns,
       avg(tokens) FILTER (WHERE scored) AS tokens,
       sum(n_ineffective) FILTER (WHERE scored) / nullif(sum(n_replied) FILTER (WHERE scored), 0)
           AS ineffective_rate,
       avg(reward) AS reward,
       avg(r_ref) FILTER (WHERE scored) AS r_ref,
       avg(regret) AS regret,
       avg(CAST(too_early AS DOUBLE)) AS too_early_rate,
       avg(CAST(too_late AS DOUBLE)) AS too_late_rate,
       count(*) FILTER (WHERE correct_by = 'equivalence') AS n_correct_by_equivalence
FROM {{prefix}}_episodes
GROUP BY ALL;

-- Per target over every behaviour and domain (the report's scatter and headline).
CREATE OR REPLACE VIEW {{prefix}}_targets AS
SELECT target,
       count(*) AS n_episodes,
       count(*) FILTER (WHERE scored) AS n_scored,
       avg(correct) AS success,
       avg(turns) FILTER (WHERE scored) AS turns,
       avg(reward) AS reward,
       avg(r_ref) FILTER (WHERE scored) AS r_ref,
       avg(regret) AS regret
FROM {{prefix}}_episodes
GROUP BY target;
