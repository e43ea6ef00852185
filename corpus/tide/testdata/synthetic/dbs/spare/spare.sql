-- A database no sample uses: the importer must not copy it.
CREATE TABLE t (x INTEGER);
INSERT INTO t VALUES (1);
