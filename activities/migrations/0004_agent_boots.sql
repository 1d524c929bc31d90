-- The scheduler hears of an agent once per boot: the master signals the resource pool when an
-- agent registers with a boot id it has not stored yet.

ALTER TABLE agents ADD COLUMN boot_id text NOT NULL DEFAULT '';
