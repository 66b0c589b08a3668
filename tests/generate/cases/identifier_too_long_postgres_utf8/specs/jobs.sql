CREATE TABLE "aufträge_für_die_rechnungsabteilung_der_zentrale_münchen_ü_x" (
    id BIGSERIAL PRIMARY KEY,
    payload JSONB NOT NULL
);
