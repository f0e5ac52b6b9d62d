"""``jobdesk_balanced`` and ``jobdesk_isolated``: the text-direction rule of :mod:`app.formatting` in SQL.

A statement that writes user text beside other words itself (the worker's one-statement completion
writes its owner's notice "Your job “…” has finished." with ``format()``) sets the text apart as
:func:`app.formatting.isolated` does: every directional embedding, override and isolate it opens closed
at its end, every PDF or PDI that closes nothing it opened dropped (``jobdesk_balanced``, the same
walk as :func:`app.formatting.balanced`), and the whole wrapped in FSI … PDI when it holds a character
of ``turning`` — :func:`app.formatting.turning_class`, passed by the caller, so that the database and
Python agree on what turns. Text without one is returned unchanged.

Revision ID: 0023
Revises: 0022
"""

from __future__ import annotations

from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None

# chr(): 8234 LRE, 8235 RLE, 8236 PDF, 8237 LRO, 8238 RLO; 8294 LRI, 8295 RLI, 8296 FSI, 8297 PDI.
# ``stack`` holds one letter per open level: ``e`` an embedding or override, ``i`` an isolate.
BALANCED = """
CREATE FUNCTION jobdesk_balanced(value text) RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
    controls CONSTANT text := chr(8234) || chr(8235) || chr(8236) || chr(8237) || chr(8238)
                              || chr(8294) || chr(8295) || chr(8296) || chr(8297);
    out text := '';
    stack text := '';
    ch text;
BEGIN
    IF translate(value, controls, '') = value THEN
        RETURN value;
    END IF;
    FOREACH ch IN ARRAY regexp_split_to_array(value, '') LOOP
        IF ch IN (chr(8234), chr(8235), chr(8237), chr(8238)) THEN
            stack := stack || 'e';
        ELSIF ch IN (chr(8294), chr(8295), chr(8296)) THEN
            stack := stack || 'i';
        ELSIF ch = chr(8236) THEN
            CONTINUE WHEN right(stack, 1) IS DISTINCT FROM 'e';
            stack := left(stack, -1);
        ELSIF ch = chr(8297) THEN
            CONTINUE WHEN position('i' IN stack) = 0;
            stack := left(stack, length(stack) - position('i' IN reverse(stack)));
        END IF;
        out := out || ch;
    END LOOP;
    RETURN out || translate(reverse(stack), 'ei', chr(8236) || chr(8297));
END
$$
"""

ISOLATED = """
CREATE FUNCTION jobdesk_isolated(value text, turning text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN value ~ turning THEN chr(8296) || jobdesk_balanced(value) || chr(8297) ELSE value END
$$
"""


def upgrade() -> None:
    op.execute(BALANCED)
    op.execute(ISOLATED)


def downgrade() -> None:
    op.execute("DROP FUNCTION jobdesk_isolated(text, text)")
    op.execute("DROP FUNCTION jobdesk_balanced(text)")
