-- ClarifyMT-style persona-driven clarification: metric views over the episode engine's views,
-- for the benchmark {{benchmark}} under the name prefix {{prefix}} (clarifymt_turns, ...).
--
-- Words, one meaning each in every view below and in the report section (section.py):
--   completed: an episode whose status is 'completed' (failed episodes are counted in the
--              report's Episodes table and left out of every view here);
--   asked:     an act turn the act judge labels clarifying_question (pred 'ask');
--   answered:  an act turn labelled direct_answer or hedge (pred 'answer'); an episode
--              answered when it has such a turn (M8);
--   refused:   an act turn labelled refusal (pred 'refusal'): neither asked nor answered;
--   unscored:  an act turn whose act verdict failed (pred NULL): left out and counted.
-- The engine's termination 'answered' (the user policy stopped because the turn did not
-- ask) is not this word: it covers refusals too, and the report calls it "ended: did not ask".
--
-- M1. Modes: a condition opening with the item's prompt "query" is live (the persona user
--     answers until the target answers or the turn cap); one opening with "static" replays a
--     stored prefix (bench_conditions.prompt, never the condition's name).
-- M2. Act turns: in live mode every assistant turn, at depth = its model turn; in static mode
--     only the episode's last assistant turn (the replayed turns are not the target's).
-- M3. The gold act at depth d is the item's gold_acts[d] (static: the prefix's own gold_acts
--     when it has them), the last entry holding beyond its length. The predicted act is the
--     act judge's label: clarifying_question -> ask; direct_answer, hedge -> answer;
--     refusal -> refusal (neither, so never correct). An unscored act is left out and counted.
-- M4. Act accuracy = predicted = gold over act turns with a scored act, by mode, target,
--     depth, dimension and persona ('all' / NULL depth where a grouping sums over it).
-- M5. Under-clarification = P(answer | gold ask); over-clarification = P(ask | gold answer),
--     over act turns with a scored act.
-- M6. Answer turns are act turns predicted "answer"; answer accuracy is the reference judge's
--     contains (and token_f1, exact_match) there, unscored left out and counted.
-- M7. Slots elicited before answering: the slot judge's slot_recall on answer turns of
--     ambiguous items (elicited slots / the item's slots), unscored left out and counted.
-- M8. Turns to answer (live): the depth of an episode's first answer turn; episodes with no
--     answer turn (turn cap, refusal) are counted, not averaged; an episode with an unscored
--     act is left out and counted.
-- M9. Question quality: the question judge's 1-5 on act turns the act judge calls
--     clarifying_question; a turn the question judge found no question is counted apart.
-- M10. Persona fidelity: the move checker's verdicts on the simulated user's replies, per
--     persona (and target, whose episodes they are in).

CREATE OR REPLACE VIEW {{prefix}}_turns AS
WITH ep AS (
    SELECT e.episode_id, e.target, e.condition, e.item_id, e.termination, i.meta, i.hidden,
           CASE c.prompt WHEN 'static' THEN 'static' ELSE 'live' END AS mode
    FROM episodes e
    JOIN bench_items i ON i.benchmark = e.benchmark AND i.item_id = e.item_id
    JOIN bench_conditions c ON c.benchmark = e.benchmark AND c.condition = e.condition
    WHERE e.benchmark = '{{benchmark}}' AND e.status = 'completed'
      AND c.prompt IN ('query', 'static')
),
t AS (
    SELECT episode_id, position, model_turn AS depth,
           max(position) OVER (PARTITION BY episode_id) AS last_position
    FROM episode_turns
    WHERE role = 'assistant' AND episode_id IN (SELECT episode_id FROM ep)
),
m AS (
    SELECT episode_id, position,
           max(label) FILTER (WHERE kind = 'act' AND measure = 'act') AS act,
           max(value) FILTER (WHERE kind = 'reference' AND measure = 'exact_match') AS exact_match,
           max(value) FILTER (WHERE kind = 'reference' AND measure = 'token_f1') AS token_f1,
           max(value) FILTER (WHERE kind = 'reference' AND measure = 'contains') AS contains,
           count(*) FILTER (WHERE kind = 'reference' AND measure = 'contains') AS n_ref_rows,
           max(value) FILTER (WHERE kind = 'clarifymt_question' AND measure = 'quality') AS quality,
           max(label) FILTER (WHERE kind = 'clarifymt_question' AND measure = 'quality') AS quality_label,
           count(*) FILTER (WHERE kind = 'clarifymt_question' AND measure = 'quality') AS n_quality_rows,
           max(value) FILTER (WHERE kind = 'clarifymt_slots' AND measure = 'slot_recall') AS slot_recall,
           count(*) FILTER (WHERE kind = 'clarifymt_slots' AND measure = 'slot_recall') AS n_slot_rows
    FROM episode_verdicts WHERE benchmark = '{{benchmark}}'
    GROUP BY episode_id, position
),
g AS (
    SELECT ep.*, t.position, t.depth, t.position = t.last_position AS is_last,
           CAST(coalesce(CASE WHEN ep.mode = 'static' THEN json_extract(ep.hidden, '$.static_gold_acts') END,
                         json_extract(ep.hidden, '$.gold_acts')) AS VARCHAR[]) AS gold
    FROM ep JOIN t USING (episode_id)
)
SELECT g.episode_id, g.target, g.condition, g.mode, g.item_id, g.termination,
       json_extract_string(g.meta, '$.persona') AS persona,
       coalesce(json_extract_string(g.meta, '$.dimension'), 'none') AS dimension,
       json_extract_string(g.meta, '$.subtype') AS subtype,
       coalesce(TRY_CAST(json_extract(g.meta, '$.ambiguous') AS BOOLEAN), false) AS ambiguous,
       g.position, g.depth, g.is_last,
       g.gold[least(g.depth, len(g.gold))] AS gold_act,
       m.act,
       CASE m.act WHEN 'clarifying_question' THEN 'ask' WHEN 'direct_answer' THEN 'answer'
                  WHEN 'hedge' THEN 'answer' WHEN 'refusal' THEN 'refusal' END AS pred,
       m.exact_match, m.token_f1, m.contains, coalesce(m.n_ref_rows, 0) AS n_ref_rows,
       m.quality, m.quality_label, coalesce(m.n_quality_rows, 0) AS n_quality_rows,
       m.slot_recall, coalesce(m.n_slot_rows, 0) AS n_slot_rows
FROM g LEFT JOIN m USING (episode_id, position)
WHERE g.mode = 'live' OR g.is_last;

-- M4: act accuracy by mode, target, depth, dimension and persona, and their margins.
CREATE OR REPLACE VIEW {{prefix}}_act_accuracy AS
SELECT mode, target,
       CASE WHEN grouping(depth) = 1 THEN NULL ELSE depth END AS depth,
       CASE WHEN grouping(dimension) = 1 THEN 'all' ELSE dimension END AS dimension,
       CASE WHEN grouping(persona) = 1 THEN 'all' ELSE persona END AS persona,
       count(*) AS n_turns,
       count(*) FILTER (WHERE pred IS NULL) AS n_act_unscored,
       count(pred) AS n_judged,
       count(*) FILTER (WHERE pred = gold_act) AS n_correct,
       count(*) FILTER (WHERE pred = gold_act) / nullif(count(pred), 0) AS accuracy
FROM {{prefix}}_turns
GROUP BY GROUPING SETS ((mode, target, depth, dimension, persona), (mode, target, depth, persona),
                        (mode, target, depth, dimension), (mode, target, dimension, persona),
                        (mode, target, depth), (mode, target, dimension), (mode, target, persona),
                        (mode, target));

-- M5: under- and over-clarification, overall and by depth, dimension and persona.
CREATE OR REPLACE VIEW {{prefix}}_clarification AS
SELECT mode, target,
       CASE WHEN grouping(depth) = 1 THEN NULL ELSE depth END AS depth,
       CASE WHEN grouping(dimension) = 1 THEN 'all' ELSE dimension END AS dimension,
       CASE WHEN grouping(persona) = 1 THEN 'all' ELSE persona END AS persona,
       count(pred) FILTER (WHERE gold_act = 'ask') AS n_gold_ask,
       count(*) FILTER (WHERE gold_act = 'ask' AND pred = 'answer') AS n_under,
       count(*) FILTER (WHERE gold_act = 'ask' AND pred = 'answer')
           / nullif(count(pred) FILTER (WHERE gold_act = 'ask'), 0) AS under_clarification,
       count(pred) FILTER (WHERE gold_act = 'answer') AS n_gold_answer,
       count(*) FILTER (WHERE gold_act = 'answer' AND pred = 'ask') AS n_over,
       count(*) FILTER (WHERE gold_act = 'answer' AND pred = 'ask')
           / nullif(count(pred) FILTER (WHERE gold_act = 'answer'), 0) AS over_clarification
FROM {{prefix}}_turns
GROUP BY GROUPING SETS ((mode, target), (mode, target, depth), (mode, target, dimension),
                        (mode, target, persona));

-- M6: answer accuracy on answer turns, by depth and persona.
CREATE OR REPLACE VIEW {{prefix}}_answers AS
SELECT mode, target,
       CASE WHEN grouping(depth) = 1 THEN NULL ELSE depth END AS depth,
       CASE WHEN grouping(persona) = 1 THEN 'all' ELSE persona END AS persona,
       count(*) AS n_answers,
       count(contains) AS n_scored,
       count(*) FILTER (WHERE n_ref_rows > 0 AND contains IS NULL) AS n_unscored,
       avg(contains) AS contains,
       avg(token_f1) AS token_f1,
       avg(exact_match) AS exact_match
FROM {{prefix}}_turns
WHERE pred = 'answer'
GROUP BY GROUPING SETS ((mode, target, depth, persona), (mode, target, depth),
                        (mode, target, persona), (mode, target));

-- M7: slots elicited before answering (ambiguous items).
CREATE OR REPLACE VIEW {{prefix}}_slots AS
SELECT mode, target,
       CASE WHEN grouping(persona) = 1 THEN 'all' ELSE persona END AS persona,
       count(*) AS n_answers,
       count(slot_recall) AS n_scored,
       count(*) FILTER (WHERE n_slot_rows > 0 AND slot_recall IS NULL) AS n_unscored,
       avg(slot_recall) AS slot_recall,
       count(*) FILTER (WHERE slot_recall = 1) / nullif(count(slot_recall), 0) AS all_slots_rate
FROM {{prefix}}_turns
WHERE pred = 'answer' AND ambiguous
GROUP BY GROUPING SETS ((mode, target, persona), (mode, target));

-- M8: turns to answer (live episodes).
CREATE OR REPLACE VIEW {{prefix}}_turns_to_answer AS
WITH e AS (
    SELECT episode_id, target, persona, dimension, ambiguous,
           min(depth) FILTER (WHERE pred = 'answer') AS answer_depth,
           count(*) FILTER (WHERE pred IS NULL) AS n_unscored
    FROM {{prefix}}_turns WHERE mode = 'live'
    GROUP BY ALL
)
SELECT target,
       CASE WHEN grouping(persona) = 1 THEN 'all' ELSE persona END AS persona,
       count(*) AS n_episodes,
       count(*) FILTER (WHERE n_unscored > 0) AS n_act_unscored,
       count(answer_depth) FILTER (WHERE n_unscored = 0) AS n_answered,
       count(*) FILTER (WHERE n_unscored = 0 AND answer_depth IS NULL) AS n_no_answer,
       avg(answer_depth) FILTER (WHERE n_unscored = 0) AS turns_to_answer,
       avg(answer_depth) FILTER (WHERE n_unscored = 0 AND ambiguous) AS turns_to_answer_ambiguous
FROM e
GROUP BY GROUPING SETS ((target, persona), (target));

-- M9: question quality (1-5) of the turns that ask.
CREATE OR REPLACE VIEW {{prefix}}_question_quality AS
SELECT mode, target,
       CASE WHEN grouping(persona) = 1 THEN 'all' ELSE persona END AS persona,
       count(*) AS n_questions,
       count(quality) AS n_rated,
       count(*) FILTER (WHERE quality_label = 'not_applicable') AS n_not_question,
       count(*) FILTER (WHERE n_quality_rows > 0 AND quality IS NULL AND quality_label IS NULL)
           AS n_unscored,
       avg(quality) AS quality
FROM {{prefix}}_turns
WHERE act = 'clarifying_question'
GROUP BY GROUPING SETS ((mode, target, persona), (mode, target));

-- M10: the move checker on the persona user's replies.
CREATE OR REPLACE VIEW {{prefix}}_persona_fidelity AS
WITH r AS (
    SELECT episode_id, position, target, json_extract_string(meta, '$.persona') AS persona,
           max(value) FILTER (WHERE measure = 'realises_persona') AS realises,
           max(value) FILTER (WHERE measure = 'leaks_unasked') AS leaks,
           max(value) FILTER (WHERE measure = 'passed') AS passed
    FROM episode_verdicts
    WHERE benchmark = '{{benchmark}}' AND kind = 'clarifymt_persona_check'
    GROUP BY ALL
)
SELECT CASE WHEN grouping(target) = 1 THEN 'all' ELSE target END AS target, persona,
       count(*) AS n_replies,
       count(passed) AS n_checked,
       avg(realises) AS realises_rate,
       avg(leaks) AS leak_rate,
       avg(passed) AS pass_rate
FROM r
GROUP BY GROUPING SETS ((target, persona), (persona));

-- Per mode and target: the headline numbers.
CREATE OR REPLACE VIEW {{prefix}}_summary AS
WITH a AS (SELECT * FROM {{prefix}}_act_accuracy
           WHERE depth IS NULL AND dimension = 'all' AND persona = 'all'),
c AS (SELECT * FROM {{prefix}}_clarification
      WHERE depth IS NULL AND dimension = 'all' AND persona = 'all'),
s AS (SELECT * FROM {{prefix}}_answers WHERE depth IS NULL AND persona = 'all'),
sl AS (SELECT * FROM {{prefix}}_slots WHERE persona = 'all'),
q AS (SELECT * FROM {{prefix}}_question_quality WHERE persona = 'all'),
tt AS (SELECT * FROM {{prefix}}_turns_to_answer WHERE persona = 'all')
SELECT a.mode, a.target, a.n_judged, a.n_act_unscored, a.accuracy AS act_accuracy,
       c.under_clarification, c.n_gold_ask, c.over_clarification, c.n_gold_answer,
       s.contains AS answer_contains, s.n_scored AS n_answers_scored,
       sl.slot_recall, sl.n_scored AS n_slots_scored,
       q.quality AS question_quality, q.n_rated AS n_questions_rated,
       CASE WHEN a.mode = 'live' THEN tt.turns_to_answer END AS turns_to_answer
FROM a
LEFT JOIN c USING (mode, target)
LEFT JOIN s USING (mode, target)
LEFT JOIN sl USING (mode, target)
LEFT JOIN q USING (mode, target)
LEFT JOIN tt ON tt.target = a.target;
