--
-- PostgreSQL database dump
--

SET statement_timeout = 0;
SET lock_timeout = 0;
SET idle_in_transaction_session_timeout = 0;
SET client_encoding = 'UTF8';
SET standard_conforming_strings = on;
SELECT pg_catalog.set_config('search_path', '', false);
SET check_function_bodies = false;
SET xmloption = content;
SET client_min_messages = warning;
SET row_security = off;

SET default_tablespace = '';

SET default_table_access_method = heap;

CREATE FUNCTION public.touch() RETURNS trigger
    LANGUAGE plpgsql
    AS $$ BEGIN NEW.due := now(); RETURN NEW; END $$;

ALTER FUNCTION public.touch() OWNER TO app;

--
-- Name: jobs; Type: TABLE; Schema: public; Owner: app
--

CREATE TABLE public.jobs (
    id bigint NOT NULL,
    payload text NOT NULL,
    due timestamp with time zone DEFAULT now() NOT NULL
);


ALTER TABLE public.jobs OWNER TO app;

COMMENT ON TABLE public.jobs IS 'the jobs';

CREATE SEQUENCE public.jobs_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;


ALTER SEQUENCE public.jobs_id_seq OWNER TO app;

ALTER SEQUENCE public.jobs_id_seq OWNED BY public.jobs.id;

ALTER TABLE ONLY public.jobs ALTER COLUMN id SET DEFAULT nextval('public.jobs_id_seq'::regclass);

ALTER TABLE ONLY public.jobs
    ADD CONSTRAINT jobs_pkey PRIMARY KEY (id);

CREATE INDEX jobs_claim ON public.jobs USING btree (due, id);

CREATE TRIGGER jobs_touch BEFORE INSERT ON public.jobs FOR EACH ROW EXECUTE FUNCTION public.touch();

GRANT ALL ON TABLE public.jobs TO worker;
REVOKE ALL ON SCHEMA public FROM PUBLIC;

DO $$ BEGIN RAISE NOTICE 'jobs table ready'; END $$;


--
-- PostgreSQL database dump complete
--
