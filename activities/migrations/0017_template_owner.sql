-- A template belongs to the user who made it (as on Determined): only they and admins change or
-- remove it. Templates made before owners were kept belong to the admin.
ALTER TABLE templates ADD COLUMN owner text NOT NULL DEFAULT 'admin';
