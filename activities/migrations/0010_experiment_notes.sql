-- An experiment's notes (Determined's `notes`: free text its users keep beside the results).

ALTER TABLE experiments ADD COLUMN notes text NOT NULL DEFAULT '';
